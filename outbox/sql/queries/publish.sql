-- name: publish
-- One round trip writes a batch of events and fans each out to the enabled
-- endpoints whose patterns match its type. Arrays of equal length carry the
-- batch (unnest keeps it one prepared statement whatever the batch size).
-- An idempotency key already present makes ON CONFLICT skip that row; the
-- caller looks those ids up afterwards (a new statement, hence a new snapshot
-- that sees a concurrent transaction's row once it has committed).
-- pg_notify is queued until commit and deduplicated per transaction, so a
-- rolled-back publish wakes nobody and a big batch sends one notification.
WITH input AS (
    SELECT *
    FROM unnest(
        %(ids)s::uuid[], %(types)s::text[], %(keys)s::text[], %(payloads)s::text[],
        %(headers)s::text[], %(idempotency_keys)s::text[], %(delays)s::float8[]
    ) WITH ORDINALITY AS i(id, type, key, payload, headers, idempotency_key, delay, ord)
),
targets AS (
    SELECT id, events_like FROM outbox.endpoints
    WHERE enabled AND removed_at IS NULL
),
inserted AS (
    INSERT INTO outbox.events AS ev
        (id, type, key, payload, headers, idempotency_key, created_at, deliver_after, unrouted)
    SELECT i.id, i.type, i.key, i.payload::json, i.headers::jsonb, i.idempotency_key,
           clock_timestamp(),
           clock_timestamp() + make_interval(secs => i.delay),
           NOT EXISTS (SELECT 1 FROM targets t WHERE i.type LIKE ANY (t.events_like))
    FROM input i
    ORDER BY i.ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING ev.id, ev.seq, ev.type, ev.key, ev.deliver_after
),
fanned AS (
    INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, next_attempt_at)
    SELECT e.id, t.id, e.seq, e.key, e.deliver_after
    FROM inserted e
    JOIN targets t ON e.type LIKE ANY (t.events_like)
    RETURNING 1
)
-- The uncorrelated sub-select runs once (an InitPlan), not once per row.
SELECT inserted.id::text,
       (SELECT pg_notify('outbox_wakeup', '') WHERE EXISTS (SELECT 1 FROM fanned)) AS woke
FROM inserted;

-- name: event_ids_by_idempotency_key
SELECT idempotency_key, id::text FROM outbox.events
WHERE idempotency_key = ANY (%(idempotency_keys)s::text[]);
