-- Queries of the web view's pages for the why: an endpoint's page, and the
-- endpoints page's last failures and chart. Used by outbox/web/why.py. Each reads only
-- what the viewer role of `outbox grants --viewer` may read.

-- name: web_endpoint_options
-- The options of a live endpoint that hold no secret, no URL and no header:
-- what the page shows when its role may not read the rest (the viewer).
SELECT e.name, e.events, e.tenant, e.max_attempts, e.timeout_seconds,
       e.min_backoff_seconds, e.max_backoff_seconds, e.max_in_flight, e.rate_limit,
       e.max_batch, e.format, e.breaker_failures, e.breaker_cooldown_seconds,
       e.breaker_window_seconds, e.breaker_rate, e.max_pending, e.max_pending_per_tenant,
       e.send_tracestate, e.description, e.when_full, e.keep_dead_seconds, e.trace_context,
       e.enabled, e.disabled_reason, e.created_at, e.updated_at, e.guarded, e.dropping,
       e.disabled_by
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
-- errors are stored masked, as last_error is. The deliveries come through
-- the endpoint's partial indexes (a plain join scans the whole table: 10
-- million finished rows are past the view's statement timeout), the dead
-- ones the %(limit)s that died last: a live endpoint's delivery dies in the
-- statement that records its last attempt (only a removal kills without
-- one), so an attempt of an earlier death is older than each of theirs.
SELECT a.at, d.event_id, a.status, a.reason, a.error
FROM outbox.endpoints e
CROSS JOIN LATERAL (
    SELECT p.id, p.event_id FROM outbox.deliveries p
    WHERE p.endpoint_id = e.id AND p.state = 'pending' AND p.attempts > 0
    UNION ALL
    SELECT f.id, f.event_id FROM outbox.deliveries f
    WHERE f.endpoint_id = e.id AND f.state = 'in_flight' AND f.attempts > 0
    UNION ALL
    (SELECT x.id, x.event_id FROM outbox.deliveries x
     WHERE x.state = 'dead' AND x.endpoint_id = e.id AND x.attempts > 0
     ORDER BY x.finished_at DESC
     LIMIT %(limit)s)) d
JOIN outbox.attempts a ON a.delivery_id = d.id
WHERE e.name = %(name)s AND e.removed_at IS NULL
ORDER BY a.at DESC, a.attempt DESC
LIMIT %(limit)s;

-- name: web_last_failures
-- Per live endpoint, the latest failed attempt of a delivery still being
-- retried, or dead within the hour: the status or error the endpoints page
-- names as its problem (an older dead letter's is on the dead letters' page).
-- Each endpoint's deliveries come through its partial indexes, and each
-- retried one's latest attempt through attempts_delivery: the cost follows
-- the endpoints' backlogs, never endpoints times the whole history (joined
-- plainly, the planner may scan every attempt once per endpoint: 5,000
-- endpoints and 15,000 attempts took 70 s).
SELECT e.name, f.status, f.reason, f.error, f.at
FROM outbox.endpoints e
CROSS JOIN LATERAL (
    SELECT a.status, a.reason, a.error, a.at
    FROM (SELECT p.id FROM outbox.deliveries p
          WHERE p.endpoint_id = e.id AND p.state = 'pending' AND p.attempts > 0
          UNION ALL
          SELECT f.id FROM outbox.deliveries f
          WHERE f.endpoint_id = e.id AND f.state = 'in_flight' AND f.attempts > 0
          UNION ALL
          SELECT x.id FROM outbox.deliveries x
          WHERE x.state = 'dead' AND x.endpoint_id = e.id
            AND x.finished_at > now() - interval '1 hour' AND x.attempts > 0) d
    CROSS JOIN LATERAL (
        SELECT l.status, l.reason, l.error, l.at
        FROM outbox.attempts l
        WHERE l.delivery_id = d.id
        ORDER BY l.at DESC
        LIMIT 1) a
    ORDER BY a.at DESC
    LIMIT 1) f
WHERE e.removed_at IS NULL;

-- name: web_minutes
-- The last hour per minute (60 rows, oldest first) of one live endpoint
-- (%(name)s: its page's chart), of one tenant's live endpoints together
-- (%(tenant)s: the endpoints page's `?tenant=`) or of every live one together
-- (both NULL: the endpoints page's chart), in one statement:
--   delivered  deliveries delivered in that minute;
--   failed     failed attempts in that minute (the attempts' history) of the
--              deliveries still pending or in flight, or finished within the
--              hour (one finished earlier has no attempt since);
--   pending    deliveries pending or in flight at the minute's end: created
--              by then and not finished by then, counted from the rows held
--              now (the backlog, and those finished within the hour).
-- Each endpoint's rows are read through its partial indexes
-- (deliveries_pending, deliveries_in_flight, deliveries_finished), as
-- admin_status reads them: the cost follows the backlog and the hour's
-- deliveries, and an endpoint with neither costs four empty index probes.
WITH span AS (
    SELECT date_trunc('minute', now()) - interval '59 minutes' AS start
), minutes AS (
    SELECT generate_series(span.start, span.start + interval '59 minutes',
                           interval '1 minute') AS minute
    FROM span
), held AS (
    SELECT d.id, d.state, d.retried, d.created_at, d.finished_at
    FROM outbox.endpoints e
    CROSS JOIN span
    CROSS JOIN LATERAL (
        SELECT p.id, p.state, p.attempts + p.attempts_before > 0 AS retried, p.created_at,
               p.finished_at
        FROM outbox.deliveries p
        WHERE p.endpoint_id = e.id AND p.state = 'pending'
        UNION ALL
        SELECT f.id, f.state, true, f.created_at, f.finished_at
        FROM outbox.deliveries f
        WHERE f.endpoint_id = e.id AND f.state = 'in_flight'
        UNION ALL
        SELECT v.id, v.state, true, v.created_at, v.finished_at
        FROM outbox.deliveries v
        WHERE v.state = 'delivered' AND v.endpoint_id = e.id AND v.finished_at >= span.start
        UNION ALL
        SELECT x.id, x.state, true, x.created_at, x.finished_at
        FROM outbox.deliveries x
        WHERE x.state = 'dead' AND x.endpoint_id = e.id AND x.finished_at >= span.start
    ) d
    WHERE e.removed_at IS NULL AND (%(name)s::text IS NULL OR e.name = %(name)s::text)
      AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s::text)
), delivered AS (
    SELECT date_trunc('minute', h.finished_at) AS minute, count(*) AS n
    FROM held h
    WHERE h.state = 'delivered'
    GROUP BY 1
), failed AS (
    SELECT date_trunc('minute', a.at) AS minute, count(*) AS n
    FROM held h
    CROSS JOIN span
    JOIN outbox.attempts a ON a.delivery_id = h.id
    WHERE h.retried AND a.at >= span.start
    GROUP BY 1
), moves AS (
    -- +1 in the minute a row joined the backlog (the first minute for an older
    -- one), -1 in the minute it left it: the running sum is the backlog.
    SELECT m.minute, sum(m.n) AS n
    FROM (SELECT greatest(date_trunc('minute', h.created_at), span.start) AS minute, 1 AS n
          FROM held h CROSS JOIN span
          UNION ALL
          SELECT date_trunc('minute', h.finished_at), -1
          FROM held h
          WHERE h.finished_at IS NOT NULL) m
    GROUP BY 1
)
SELECT m.minute, coalesce(dl.n, 0), coalesce(f.n, 0),
       (sum(coalesce(mv.n, 0)) OVER (ORDER BY m.minute))::bigint
FROM minutes m
LEFT JOIN delivered dl ON dl.minute = m.minute
LEFT JOIN failed f ON f.minute = m.minute
LEFT JOIN moves mv ON mv.minute = m.minute
ORDER BY m.minute;

-- name: web_tenants
-- The tenants' page: every tenant that owns a live endpoint or waits in a
-- live endpoint's backlog (pending or in flight, at its own endpoints or at
-- those without a tenant, which receive every tenant's events), with the
-- number of live endpoints it owns, its deliveries pending and in flight,
-- and the age of its oldest pending one. Each endpoint's undelivered rows are
-- read through its partial indexes (deliveries_turns, deliveries_in_flight),
-- as admin_status reads them, so that the finished rows are never walked; the
-- oldest age needs created_at, from the heap, as admin_status's does. The
-- page orders and pages the rows (outbox/web/tenants.py keeps them cached).
WITH live AS (
    SELECT e.id, e.tenant FROM outbox.endpoints e WHERE e.removed_at IS NULL
), waiting AS (
    SELECT d.tenant, count(*) FILTER (WHERE d.state = 'pending') AS pending,
           count(*) FILTER (WHERE d.state = 'in_flight') AS in_flight,
           min(d.created_at) FILTER (WHERE d.state = 'pending') AS oldest
    FROM live e
    CROSS JOIN LATERAL (
        SELECT p.tenant, p.state, p.created_at FROM outbox.deliveries p
        WHERE p.endpoint_id = e.id AND p.state = 'pending' AND p.tenant IS NOT NULL
        UNION ALL
        SELECT f.tenant, f.state, f.created_at FROM outbox.deliveries f
        WHERE f.endpoint_id = e.id AND f.state = 'in_flight' AND f.tenant IS NOT NULL
    ) d
    GROUP BY d.tenant
), owning AS (
    SELECT e.tenant, count(*) AS endpoints FROM live e WHERE e.tenant IS NOT NULL
    GROUP BY e.tenant
)
SELECT coalesce(o.tenant, w.tenant), coalesce(o.endpoints, 0), coalesce(w.pending, 0),
       coalesce(w.in_flight, 0),
       greatest(0, coalesce(extract(epoch FROM clock_timestamp() - w.oldest), 0))::float8
FROM owning o
FULL JOIN waiting w ON w.tenant = o.tenant;

-- name: web_tenant_waits
-- One tenant's backlog at each live endpoint where it waits (its own, and those
-- without a tenant), the largest first: the endpoints page's `?tenant=`. Two
-- index probes per live endpoint (deliveries_turns by endpoint and tenant,
-- deliveries_in_flight), whatever the other tenants hold.
SELECT e.name, w.pending, w.in_flight, w.oldest_pending_seconds
FROM outbox.endpoints e
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE d.state = 'pending') AS pending,
           count(*) FILTER (WHERE d.state = 'in_flight') AS in_flight,
           greatest(0, coalesce(extract(epoch FROM clock_timestamp()
               - min(d.created_at) FILTER (WHERE d.state = 'pending')), 0))::float8
               AS oldest_pending_seconds
    FROM (SELECT p.state, p.created_at FROM outbox.deliveries p
          WHERE p.endpoint_id = e.id AND p.tenant = %(tenant)s AND p.state = 'pending'
          UNION ALL
          SELECT f.state, f.created_at FROM outbox.deliveries f
          WHERE f.endpoint_id = e.id AND f.tenant = %(tenant)s AND f.state = 'in_flight') d
) w
WHERE e.removed_at IS NULL AND w.pending + w.in_flight > 0
ORDER BY w.pending + w.in_flight DESC, e.name;

-- name: web_is_tenant
-- Whether a search's text names a tenant the tenants' page lists: one that owns
-- a live endpoint (endpoints_tenant), or waits at one: a probe of each live
-- endpoint's deliveries_turns (by endpoint and tenant) and deliveries_in_flight,
-- the first row found enough. Lateral with LIMIT, so that each probe is an
-- index lookup: as two EXISTS the planner hashed them, reading every pending
-- row's index entry and every in-flight row (190 ms at 1,000,000 undelivered,
-- against 5 ms for 5,000 endpoints' probes).
SELECT EXISTS (SELECT FROM outbox.endpoints e
               WHERE e.tenant = %(tenant)s AND e.removed_at IS NULL)
    OR EXISTS (SELECT FROM outbox.endpoints e
               CROSS JOIN LATERAL (
                   (SELECT FROM outbox.deliveries p
                    WHERE p.endpoint_id = e.id AND p.tenant = %(tenant)s
                      AND p.state = 'pending'
                    LIMIT 1)
                   UNION ALL
                   (SELECT FROM outbox.deliveries f
                    WHERE f.endpoint_id = e.id AND f.tenant = %(tenant)s
                      AND f.state = 'in_flight'
                    LIMIT 1)) w
               WHERE e.removed_at IS NULL);

-- name: web_short_walk
-- A shorter statement timeout for the rest of this transaction: a search's walk
-- of the events for a tenant's name taken as an ordering key (outbox/web/search.py).
SELECT set_config('statement_timeout', %(millis)s, true);
