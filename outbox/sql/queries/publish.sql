-- name: publish
-- One round trip writes a batch of events and fans each out to the enabled
-- endpoints whose patterns match its type.
-- The batch travels as parallel JSON arrays, one text parameter per column,
-- zipped by ROWS FROM: it stays one prepared statement whatever its size,
-- and no driver has to adapt thousands of values one by one.
-- json_array_elements hands back each payload's text as written, so the
-- payload is stored byte for byte as the producer serialised it.
-- One clock reading serves the whole statement: created_at is the same for
-- the batch and deliver_after - created_at is exactly each event's delay.
-- An idempotency key already present makes ON CONFLICT skip that row; the
-- caller looks those ids up afterwards (a new statement, hence a new snapshot
-- that sees a concurrent transaction's row once it has committed).
-- pg_notify is queued until commit and deduplicated per transaction, so a
-- rolled-back publish wakes nobody and a big batch sends one notification.
WITH input AS (
    SELECT *
    FROM ROWS FROM (
        json_array_elements_text(%(ids)s::json),
        json_array_elements_text(%(types)s::json),
        json_array_elements_text(%(keys)s::json),
        json_array_elements(%(payloads)s::json),
        json_array_elements(%(headers)s::json),
        json_array_elements_text(%(idempotency_keys)s::json),
        json_array_elements_text(%(delays)s::json)
    ) WITH ORDINALITY AS i(id, type, key, payload, headers, idempotency_key, delay, ord)
),
clock AS (
    SELECT clock_timestamp() AS at
),
targets AS (
    SELECT id, events_like FROM outbox.endpoints
    WHERE enabled AND removed_at IS NULL
),
inserted AS (
    INSERT INTO outbox.events AS ev
        (id, type, key, payload, headers, idempotency_key, created_at, deliver_after, unrouted)
    SELECT i.id::uuid, i.type, i.key, i.payload, i.headers::jsonb, i.idempotency_key,
           c.at, c.at + make_interval(secs => i.delay::float8),
           NOT EXISTS (SELECT 1 FROM targets t WHERE i.type LIKE ANY (t.events_like))
    FROM input i CROSS JOIN clock c
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
