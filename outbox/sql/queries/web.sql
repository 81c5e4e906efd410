-- Queries of the web view's pages for the why: an endpoint's page and the
-- endpoints page's last failures. Used by outbox/web/why.py. Each reads only
-- what the viewer role of `outbox grants --viewer` may read.

-- name: web_endpoint_options
-- The options of a live endpoint that hold no secret, no URL and no header:
-- what the page shows when its role may not read the rest (the viewer).
SELECT e.name, e.events, e.tenant, e.max_attempts, e.timeout_seconds,
       e.min_backoff_seconds, e.max_backoff_seconds, e.max_in_flight, e.rate_limit,
       e.max_batch, e.format, e.breaker_failures, e.breaker_cooldown_seconds,
       e.breaker_window_seconds, e.breaker_rate, e.max_pending, e.max_pending_per_tenant,
       e.send_tracestate, e.enabled, e.disabled_reason, e.created_at, e.updated_at
FROM outbox.endpoints e
WHERE e.name = %(name)s AND e.removed_at IS NULL;

-- name: web_endpoint_circuit
-- The endpoint's circuit: its state, when it last opened, and the window's
-- counts the fleet decides by (circuit_sum_v2 adds a window's buckets), with
-- the consecutive failures an earlier release counts. An endpoint with no
-- state row yet is closed with nothing counted.
SELECT coalesce(s.circuit, 'closed'), s.opened_at, coalesce(s.failures, 0),
       coalesce(outbox.circuit_sum_v2(s.window_attempts), 0),
       coalesce(outbox.circuit_sum_v2(s.window_failures), 0)
FROM outbox.endpoints e
LEFT JOIN outbox.endpoint_state s ON s.endpoint_id = e.id
WHERE e.name = %(name)s AND e.removed_at IS NULL;

-- name: web_endpoint_failures
-- The endpoint's latest failed attempts, newest first, of the deliveries
-- still being retried (pending, in flight) and of those already dead; a
-- delivered one's earlier failures explain nothing that still stops it. The
-- errors are stored masked, as last_error is.
SELECT a.at, d.event_id, a.status, a.reason, a.error
FROM outbox.endpoints e
JOIN outbox.deliveries d ON d.endpoint_id = e.id
JOIN outbox.attempts a ON a.delivery_id = d.id
WHERE e.name = %(name)s AND e.removed_at IS NULL
  AND d.state IN ('pending', 'in_flight', 'dead') AND d.attempts > 0
ORDER BY a.at DESC, a.attempt DESC
LIMIT %(limit)s;

-- name: web_last_failures
-- Per live endpoint, the latest failed attempt of a delivery still being
-- retried, or dead within the hour: the status or error the endpoints page
-- names as its problem (an older dead letter's is on the dead letters' page).
SELECT e.name, f.status, f.reason, f.error, f.at
FROM outbox.endpoints e
CROSS JOIN LATERAL (
    SELECT a.status, a.reason, a.error, a.at
    FROM outbox.deliveries d
    JOIN outbox.attempts a ON a.delivery_id = d.id
    WHERE d.endpoint_id = e.id AND d.attempts > 0
      AND (d.state IN ('pending', 'in_flight')
           OR (d.state = 'dead' AND d.finished_at > now() - interval '1 hour'))
    ORDER BY a.at DESC
    LIMIT 1) f
WHERE e.removed_at IS NULL;

-- name: web_endpoint_minutes
-- The endpoint's last hour, per minute (60 rows, oldest first): deliveries
-- delivered (deliveries_finished: state, endpoint, finished_at) and failed
-- attempts (the history of deliveries still pending or in flight, or
-- finished within the hour: one finished earlier has no attempt since).
WITH e AS (
    SELECT id FROM outbox.endpoints WHERE name = %(name)s AND removed_at IS NULL
), span AS (
    SELECT date_trunc('minute', now()) - interval '59 minutes' AS start
), minutes AS (
    SELECT generate_series(span.start, span.start + interval '59 minutes',
                           interval '1 minute') AS minute
    FROM span
), delivered AS (
    SELECT date_trunc('minute', d.finished_at) AS minute, count(*) AS n
    FROM outbox.deliveries d, e, span
    WHERE d.state = 'delivered' AND d.endpoint_id = e.id AND d.finished_at >= span.start
    GROUP BY 1
), failed AS (
    SELECT date_trunc('minute', a.at) AS minute, count(*) AS n
    FROM outbox.deliveries d
    CROSS JOIN e
    CROSS JOIN span
    JOIN outbox.attempts a ON a.delivery_id = d.id
    WHERE d.endpoint_id = e.id AND a.at >= span.start
      AND (d.state IN ('pending', 'in_flight') OR d.finished_at >= span.start)
    GROUP BY 1
)
SELECT m.minute, coalesce(dl.n, 0), coalesce(f.n, 0)
FROM minutes m
LEFT JOIN delivered dl ON dl.minute = m.minute
LEFT JOIN failed f ON f.minute = m.minute
ORDER BY m.minute;
