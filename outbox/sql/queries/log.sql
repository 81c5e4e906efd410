-- The delivery log (outbox.endpoints.deliveries, and .send_test): what the
-- application's own pages read and do, in its transaction. Used by
-- outbox/endpoints/_log.py and _resend.py.

-- name: delivery_log_endpoints
-- The endpoints a log covers: the live one named, or every endpoint (removed
-- ones too: their deliveries stay until retention) of the tenant guard's
-- tenant. Called only with one of the two; the page statement applies the
-- guard again, so that an endpoint moved to another tenant meanwhile shows
-- nothing.
SELECT id FROM outbox.endpoints
WHERE (%(name)s::text IS NULL OR (name = %(name)s::text AND removed_at IS NULL))
  AND (%(as_tenant)s::text IS NULL OR tenant = %(as_tenant)s::text)
ORDER BY id;

-- name: delivery_log
-- One page of the delivery log, newest first (by id: the order the deliveries
-- were made in, and a key that never changes, so that pages taken with
-- before = the last row's id neither skip nor repeat a row).
-- Per endpoint (endpoint_ids; NULL: every endpoint, the last arm), two arms
-- each read at most limit rows in id order: the finished deliveries
-- (delivered, dead, discarded: nearly all of them) backwards through
-- deliveries_log (endpoint_id, id), and the unfinished ones (pending, in
-- flight: a backlog at most) through the pending and in-flight indexes,
-- sorted. A page therefore costs about limit rows per endpoint, however many
-- millions the table holds and however long ago the endpoint was busy. (The
-- primary key walked backwards and filtered by endpoint, which is what the
-- planner picks without deliveries_log, passed 2.7 million rows of other
-- endpoints in 1.2 s for an endpoint that was busy a week ago and quiet
-- since; measured on 3 million rows, 2 to 5 ms a page with it.)
-- The finished arm says "the rows before (endpoint, before) in the index's
-- order, down to the endpoint's first" as a row comparison, not as
-- endpoint_id = ... AND id < ...: with an equality the endpoint's column drops
-- out of the sort order, and the planner may take the primary key's order
-- instead (estimated cheaper for an endpoint of a few, the pathological walk
-- above); the comparison is deliveries_log's order alone, and positions its
-- scan exactly (an index-only scan, where the visibility map allows).
-- finished and unfinished switch an arm off for a state= filter (a constant
-- false: the arm is not run). The other filters are checked on the rows the
-- arms walk: event_id is read through deliveries_event by the planner,
-- tenant and since are not bounds of the walk, and a narrow one passes the
-- endpoint's older rows. Statements run unprepared (outbox/endpoints/_store),
-- so each NULL filter folds away before planning.
-- The filters are written out in each arm: each must hold before that arm's
-- LIMIT. The page's rows are joined again by id, under the tenant guard.
WITH page AS (
    SELECT x.id
    FROM unnest(%(endpoint_ids)s::bigint[]) AS t(endpoint_id)
    CROSS JOIN LATERAL (
        (SELECT d.id FROM outbox.deliveries d
         WHERE %(finished)s::boolean
           AND (d.endpoint_id, d.id) < (t.endpoint_id, %(before)s::bigint)
           AND d.endpoint_id >= t.endpoint_id
           AND d.state = ANY (ARRAY['delivered', 'dead', 'discarded'])
           AND (%(state)s::text IS NULL OR d.state = %(state)s::text)
           AND (%(tenant)s::text IS NULL OR d.tenant = %(tenant)s::text)
           AND (%(event_id)s::uuid IS NULL OR d.event_id = %(event_id)s::uuid)
           AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s::timestamptz)
         ORDER BY d.endpoint_id DESC, d.id DESC
         LIMIT %(limit)s)
        UNION ALL
        (SELECT d.id FROM outbox.deliveries d
         WHERE %(unfinished)s::boolean
           AND d.endpoint_id = t.endpoint_id
           AND (d.state = 'pending' OR d.state = 'in_flight')
           AND d.id < %(before)s::bigint
           AND (%(state)s::text IS NULL OR d.state = %(state)s::text)
           AND (%(tenant)s::text IS NULL OR d.tenant = %(tenant)s::text)
           AND (%(event_id)s::uuid IS NULL OR d.event_id = %(event_id)s::uuid)
           AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s::timestamptz)
         ORDER BY d.id DESC
         LIMIT %(limit)s)
    ) x
    UNION ALL
    (SELECT d.id FROM outbox.deliveries d
     WHERE %(endpoint_ids)s::bigint[] IS NULL
       AND d.id < %(before)s::bigint
       AND (%(state)s::text IS NULL OR d.state = %(state)s::text)
       AND (%(tenant)s::text IS NULL OR d.tenant = %(tenant)s::text)
       AND (%(event_id)s::uuid IS NULL OR d.event_id = %(event_id)s::uuid)
       AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s::timestamptz)
     ORDER BY d.id DESC
     LIMIT %(limit)s)
    ORDER BY 1 DESC
    LIMIT %(limit)s
)
SELECT d.id, d.event_id::text AS event_id, e.name AS endpoint, d.tenant, ev.type, d.key,
       d.state, d.attempts_before + d.attempts AS attempts, d.created_at,
       CASE WHEN d.state = 'pending' AND d.next_attempt_at < 'infinity'::timestamptz
            THEN d.next_attempt_at END AS next_attempt_at,
       CASE WHEN d.state = 'delivered' THEN d.finished_at END AS delivered_at,
       d.last_status, d.last_error
FROM page p
JOIN outbox.deliveries d ON d.id = p.id
JOIN outbox.endpoints e ON e.id = d.endpoint_id
JOIN outbox.events ev ON ev.id = d.event_id
WHERE %(as_tenant)s::text IS NULL OR e.tenant = %(as_tenant)s::text
ORDER BY d.id DESC;

-- name: endpoint_send_test
-- send_test: one event, of the endpoint's tenant, delivered to that endpoint
-- alone: the event is inserted with its one delivery, and never routed by
-- pattern (publish's statement would hand it to every endpoint whose
-- patterns match its type: the operator's own, without a tenant, among
-- them). It counts against a --max-pending bound as a replay does (shard -1),
-- and wakes the dispatchers at commit. The endpoint row is locked FOR SHARE,
-- as a replay locks it: a removal waits, or went first and nothing is made.
WITH target AS (
    SELECT id, tenant FROM outbox.endpoints
    WHERE id = %(endpoint_id)s AND removed_at IS NULL
    FOR SHARE
),
inserted AS (
    INSERT INTO outbox.events AS ev (id, type, payload, traceparent, tracestate, tenant)
    SELECT %(id)s::uuid, %(type)s, %(payload)s::json, %(traceparent)s::text,
           %(tracestate)s::text, t.tenant
    FROM target t
    RETURNING ev.id, ev.seq, ev.tenant, ev.deliver_after
),
fanned AS (
    INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, tenant, next_attempt_at)
    SELECT i.id, t.id, i.seq, i.tenant, i.deliver_after
    FROM inserted i CROSS JOIN target t
    RETURNING endpoint_id
),
counted AS (
    UPDATE outbox.endpoint_backlog b
    SET undelivered = b.undelivered + (SELECT count(*) FROM fanned)
    FROM target t
    WHERE b.endpoint_id = t.id AND b.shard = -1
)
SELECT i.id::text, (SELECT pg_notify('outbox_wakeup', '') WHERE EXISTS (SELECT 1 FROM fanned))
FROM inserted i;
