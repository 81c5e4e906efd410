-- Queries of `outbox show`: one event's whole story. Used by outbox/history.py.

-- name: show_event
-- The event itself, with the W3C trace context it was published in (if any),
-- its payload as stored (json keeps the producer's text; `show --payload`),
-- and its tenant (NULL: none).
SELECT ev.id::text, ev.type, ev.key, ev.created_at, ev.traceparent, ev.payload::text,
       ev.tenant
FROM outbox.events ev
WHERE ev.id = %(event_id)s;

-- name: show_deliveries
-- Every delivery of the event (a replay adds one per endpoint each time),
-- through deliveries_event; the LEFT JOIN keeps one whose endpoint row was
-- deleted by hand. attempts_before + attempts is the delivery's attempt
-- count over its whole life, as the history numbers it. A delivery parked
-- behind an earlier event of its key is due at 'infinity' (see park_blocked),
-- which a Python datetime cannot hold: it comes as NULL and a flag.
-- as_tenant (outbox.endpoints.attempts' tenant guard; NULL for `show`): the
-- deliveries at that tenant's endpoints of that tenant's event only, so that
-- another tenant's event reads as an unknown one.
-- Every column is named: outbox.endpoints reads the rows as dicts.
SELECT d.id, coalesce(e.name, '#' || d.endpoint_id::text) AS endpoint,
       e.removed_at IS NOT NULL AS removed, d.state, d.attempts_before + d.attempts AS attempts,
       nullif(d.next_attempt_at, 'infinity') AS next_attempt_at, d.last_error,
       d.last_status, d.finished_at, d.last_duration_seconds,
       d.next_attempt_at = 'infinity' AS parked
FROM outbox.deliveries d
LEFT JOIN outbox.endpoints e ON e.id = d.endpoint_id
WHERE d.event_id = %(event_id)s
  AND (%(as_tenant)s::text IS NULL
       OR (e.tenant = %(as_tenant)s::text AND d.tenant = %(as_tenant)s::text))
ORDER BY 2, d.id;

-- name: show_attempts
-- The failed attempts of those deliveries, oldest first (attempts_delivery).
SELECT a.delivery_id, a.attempt, a.at, a.status, a.reason, a.duration_seconds, a.error
FROM outbox.attempts a
WHERE a.delivery_id = ANY (%(delivery_ids)s::bigint[])
ORDER BY a.at, a.attempt;
