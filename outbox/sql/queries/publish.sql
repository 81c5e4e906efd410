-- name: publish
-- One round trip writes a batch of events and fans each out to the live
-- endpoints whose patterns match its type, enabled or not: a disabled endpoint
-- is paused, and what is published meanwhile waits for it (docs/concepts.md, "Endpoints").
-- The batch travels as parallel JSON arrays, one text parameter per column,
-- zipped by ROWS FROM: it stays one prepared statement whatever its size,
-- and no driver has to adapt thousands of values one by one.
-- json_array_elements hands back each payload's text as written, so the
-- payload is stored byte for byte as the producer serialised it.
-- traceparent and tracestate: the W3C trace context the event was published
-- in, or JSON null (SQL NULL) for none.
-- One clock reading serves the whole statement: created_at is the same for
-- the batch and deliver_after - created_at is exactly each event's delay.
-- An idempotency key already present makes ON CONFLICT skip that row; the
-- caller looks those ids up afterwards (a new statement, hence a new snapshot
-- that sees a concurrent transaction's row once it has committed).
-- pg_notify is queued until commit and deduplicated per transaction, so a
-- rolled-back publish wakes nobody and a big batch sends one notification.
-- Key order (docs/concepts.md, "Key order"): producers of one key take turns. key_locks takes a
-- transaction-scoped advisory lock per distinct key of the batch, in key
-- order (so that two batches cannot deadlock each other), before any event of
-- the batch gets its seq: the inserted CTE joins it, so it is evaluated
-- before the first row is inserted. A second transaction publishing the same
-- key waits here until the first commits or rolls back, so seq order is the
-- order in which the transactions of one key end, and a later event can
-- never be delivered before an earlier one whose transaction was still open.
-- The two-int form (a fixed class, the key's hash) keeps clear of the bigint
-- advisory locks applications use; a hash collision only makes two keys take
-- turns.
-- --max-pending (docs/concepts.md, "Backpressure"): over finds a bounded endpoint the batch would
-- take past its bound (what it holds, as its counter shards add up:
-- outbox.backlog_v1, plus
-- the events of this batch routed to it). Then nothing is written (every
-- write below is conditional on over being empty, the key locks too) and
-- one row names the endpoint: the caller raises BacklogFull, and its
-- transaction is as it was. Otherwise counted adds the new deliveries to
-- one of the endpoint's 16 producer shards (outbox.endpoint_backlog), the
-- one this connection prefers if no other open transaction holds it (SKIP
-- LOCKED), so that concurrent producers rarely wait on one another. Only
-- bounded endpoints have shards: an unbounded one costs nothing here.
-- --max-pending-per-tenant: over_tenant counts each tenant's undelivered
-- deliveries at a bounded endpoint the batch routes some of its events to
-- (outbox.tenant_backlog_v1, each count stopping at the bound). Like
-- --max-pending, concurrent transactions that each see room may together
-- pass the bound, by at most their number. The first refusal (by endpoint name, then tenant) is the one
-- reported; refused names the tenant, NULL for the endpoint's own bound.
-- --when-full drop-oldest: such an endpoint's bounds refuse nothing (over
-- and over_tenant pass it by); its new deliveries are counted all the same,
-- and the dispatcher discards its oldest pending ones past the bounds
-- (discard_over in dispatch.sql).
-- Key order is per tenant (no tenant being a tenant of its own): the key
-- locks of a tenant's keys are its own, and an event without a tenant takes
-- the same lock as the previous release's publishers take for its key.
-- Tenants' endpoints (docs/concepts.md, "Endpoints of a tenant"): an event goes
-- to the endpoints whose patterns match its type and that belong to no
-- tenant or to the event's (written out in each place that routes).
-- targets keeps only those that may take one of this batch's events: the
-- endpoints without a tenant, and those of the batch's tenants, each arm read
-- from the index endpoints_tenant, so that ten thousand customers' endpoints
-- cost publish() no more than the few that can match. (One arm with an OR
-- would scan them all, and its estimate of thousands of rows per CTE would
-- make the planner compile the statement with JIT: 60 ms a publish.)
WITH input AS (
    SELECT *
    FROM ROWS FROM (
        json_array_elements_text(%(ids)s::json),
        json_array_elements_text(%(types)s::json),
        json_array_elements_text(%(keys)s::json),
        json_array_elements(%(payloads)s::json),
        json_array_elements(%(headers)s::json),
        json_array_elements_text(%(idempotency_keys)s::json),
        json_array_elements_text(%(delays)s::json),
        json_array_elements_text(%(traceparents)s::json),
        json_array_elements_text(%(tracestates)s::json),
        json_array_elements_text(%(tenants)s::json)
    ) WITH ORDINALITY AS i(id, type, key, payload, headers, idempotency_key, delay,
                           traceparent, tracestate, tenant, ord)
),
targets AS (
    SELECT id, name, events_like, max_pending, max_pending_per_tenant, tenant, when_full
    FROM outbox.endpoints
    WHERE removed_at IS NULL AND tenant IS NULL
    UNION ALL
    SELECT id, name, events_like, max_pending, max_pending_per_tenant, tenant, when_full
    FROM outbox.endpoints
    WHERE removed_at IS NULL
      AND tenant OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT DISTINCT i.tenant FROM input i
                                                  WHERE i.tenant IS NOT NULL))
),
over AS MATERIALIZED (
    SELECT t.name, t.max_pending, h.held
    FROM (SELECT * FROM targets WHERE max_pending IS NOT NULL AND when_full = 'refuse') t
    CROSS JOIN LATERAL (SELECT count(*) AS routed FROM input i
                        WHERE i.type LIKE ANY (t.events_like)
                          AND (t.tenant IS NULL OR t.tenant OPERATOR(pg_catalog.=) i.tenant)) r
    CROSS JOIN LATERAL outbox.backlog_v1(t.id) h
    WHERE r.routed > 0 AND h.held + r.routed > t.max_pending
    ORDER BY t.name
    LIMIT 1
),
over_tenant AS MATERIALIZED (
    SELECT t.name, t.max_pending_per_tenant AS bound, h.pending + h.in_flight AS held, x.tenant
    FROM (SELECT * FROM targets
          WHERE max_pending_per_tenant IS NOT NULL AND when_full = 'refuse') t
    CROSS JOIN LATERAL (SELECT i.tenant, count(*) AS routed FROM input i
                        WHERE i.tenant IS NOT NULL AND i.type LIKE ANY (t.events_like)
                          AND (t.tenant IS NULL OR t.tenant OPERATOR(pg_catalog.=) i.tenant)
                        GROUP BY i.tenant) x
    CROSS JOIN LATERAL outbox.tenant_backlog_v1(t.id, x.tenant, t.max_pending_per_tenant) h
    WHERE h.pending + h.in_flight + x.routed > t.max_pending_per_tenant
    ORDER BY t.name, x.tenant
    LIMIT 1
),
refused AS MATERIALIZED (
    (SELECT name, max_pending AS bound, held, NULL::text AS tenant FROM over)
    UNION ALL
    (SELECT name, bound, held, tenant FROM over_tenant)
    ORDER BY name, tenant NULLS FIRST
    LIMIT 1
),
key_locks AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(7469813, hashtext(k.lock))) AS taken
    FROM (SELECT DISTINCT CASE WHEN tenant IS NULL THEN key
                               ELSE tenant || E'\n' || key END AS lock
          FROM input
          WHERE key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM refused)
          ORDER BY 1) AS k
),
clock AS (
    SELECT clock_timestamp() AS at FROM key_locks
),
inserted AS (
    INSERT INTO outbox.events AS ev
        (id, type, key, payload, headers, idempotency_key, created_at, deliver_after, unrouted,
         traceparent, tracestate, tenant)
    SELECT i.id::uuid, i.type, i.key, i.payload, i.headers::jsonb, i.idempotency_key,
           c.at, c.at + make_interval(secs => i.delay::float8),
           NOT EXISTS (SELECT 1 FROM targets t WHERE i.type LIKE ANY (t.events_like)
                       AND (t.tenant IS NULL OR t.tenant OPERATOR(pg_catalog.=) i.tenant)),
           i.traceparent, i.tracestate, i.tenant
    FROM input i CROSS JOIN clock c
    WHERE NOT EXISTS (SELECT 1 FROM refused)
    ORDER BY i.ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING ev.id, ev.seq, ev.type, ev.key, ev.tenant, ev.deliver_after
),
fanned AS (
    INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, tenant, next_attempt_at)
    SELECT e.id, t.id, e.seq, e.key, e.tenant, e.deliver_after
    FROM inserted e
    JOIN targets t ON e.type LIKE ANY (t.events_like)
                  AND (t.tenant IS NULL OR t.tenant OPERATOR(pg_catalog.=) e.tenant)
    RETURNING endpoint_id
),
counted AS (
    UPDATE outbox.endpoint_backlog s
    SET undelivered = s.undelivered + f.n
    FROM (SELECT fanned.endpoint_id, count(*) AS n FROM fanned
          JOIN targets t ON t.id = fanned.endpoint_id AND t.max_pending IS NOT NULL
          GROUP BY fanned.endpoint_id) f
    CROSS JOIN LATERAL (
        SELECT coalesce((SELECT b.shard FROM outbox.endpoint_backlog b
                         WHERE b.endpoint_id = f.endpoint_id AND b.shard >= 0
                         ORDER BY b.shard = pg_backend_pid() %% 16 DESC, b.shard
                         LIMIT 1
                         FOR UPDATE SKIP LOCKED),
                        pg_backend_pid() %% 16) AS shard) pick
    WHERE s.endpoint_id = f.endpoint_id AND s.shard = pick.shard
)
-- The uncorrelated sub-select runs once (an InitPlan), not once per row.
SELECT inserted.id::text,
       (SELECT pg_notify('outbox_wakeup', '') WHERE EXISTS (SELECT 1 FROM fanned)) AS woke,
       NULL::text AS full_endpoint, NULL::bigint AS bound, NULL::bigint AS held,
       NULL::text AS full_tenant
FROM inserted
UNION ALL
SELECT NULL, NULL, refused.name, refused.bound, refused.held, refused.tenant FROM refused;

-- name: event_ids_by_idempotency_key
SELECT idempotency_key, id::text FROM outbox.events
WHERE idempotency_key = ANY (%(idempotency_keys)s::text[]);

-- name: backend_pid
-- Once per connection, before its first publish: the server's pid for this
-- session, compared with the one libpq was given at connect. A transaction
-- pooler (PgBouncer) hands its clients a key of its own, so the two differ,
-- and publish then prepares nothing (a prepared statement would be missing
-- on the next transaction's server connection).
SELECT pg_backend_pid();
