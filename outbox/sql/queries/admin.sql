-- Queries of the operator commands: status, dead letters, replay, purge.
-- Used by outbox/admin.py and outbox/retention.py.

-- name: admin_status
-- One round trip. The unrouted count reads the events_unrouted partial index;
-- each per-endpoint count reads the partial index of deliveries for that state
-- (deliveries_pending, deliveries_in_flight, deliveries_finished), all keyed on
-- endpoint_id, so the cost follows that endpoint's rows in that state and the
-- table itself is never scanned. The oldest pending age needs created_at, a
-- heap column, so only the pending rows' heap tuples are visited. The LEFT JOIN
-- keeps one row (with a NULL name) when no live endpoint exists, so that the
-- unrouted count always comes back. Discarded deliveries (by the endpoint's
-- policy) are counted through deliveries_discarded, and whether the endpoint
-- drops what is made for it (disable --drop) and its tenant come along.
SELECT u.unrouted, ep.name, ep.enabled, ep.pending, ep.in_flight, ep.delivered, ep.dead,
       ep.oldest_pending_seconds, ep.circuit, ep.max_pending, ep.disabled_reason, ep.opened_at,
       ep.discarded, ep.dropping, ep.tenant
FROM (SELECT count(*) AS unrouted FROM outbox.events WHERE unrouted) AS u
LEFT JOIN LATERAL (
    SELECT e.name, e.enabled, e.max_pending, e.disabled_reason, e.dropping, e.tenant, p.pending,
           p.oldest_pending_seconds,
           coalesce((SELECT s.circuit FROM outbox.endpoint_state s WHERE s.endpoint_id = e.id),
                    'closed') AS circuit,
           (SELECT s.opened_at FROM outbox.endpoint_state s WHERE s.endpoint_id = e.id
            AND s.circuit <> 'closed') AS opened_at,
           (SELECT count(*) FROM outbox.deliveries d
            WHERE d.endpoint_id = e.id AND d.state = 'in_flight') AS in_flight,
           (SELECT count(*) FROM outbox.deliveries d
            WHERE d.state = 'delivered' AND d.endpoint_id = e.id) AS delivered,
           (SELECT count(*) FROM outbox.deliveries d
            WHERE d.state = 'dead' AND d.endpoint_id = e.id) AS dead,
           (SELECT count(*) FROM outbox.deliveries d
            WHERE d.state = 'discarded' AND d.endpoint_id = e.id) AS discarded
    FROM outbox.endpoints e
    CROSS JOIN LATERAL (
        SELECT count(*) AS pending,
               greatest(0, coalesce(
                   extract(epoch FROM clock_timestamp() - min(d.created_at)), 0
               ))::float8 AS oldest_pending_seconds
        FROM outbox.deliveries d
        WHERE d.endpoint_id = e.id AND d.state = 'pending'
    ) AS p
    WHERE e.removed_at IS NULL
) AS ep ON true
ORDER BY ep.name;

-- name: admin_tenant_backlogs
-- `outbox status --tenants`: per live endpoint, the tenants with the largest
-- backlogs (pending plus in flight), at most %(per_endpoint)s each, largest
-- first. The tenants and the oldest pending age come from one pass over the
-- endpoint's undelivered rows (created_at, as admin_status reads it for the
-- whole endpoint), each state's through its partial index: written as one
-- `state IN ('pending', 'in_flight')`, no partial index served it and the
-- planner scanned the whole table once per endpoint (4.7 s for 500 tenants'
-- endpoints and 35,000 rows, past a minute at 5,000; BENCHMARKS.md, "The web
-- view by tenant"). The counts are the ones --max-pending-per-tenant checks
-- (outbox.tenant_backlog_v1, uncapped). With %(endpoint)s, that endpoint's
-- only (an endpoint's page in the web view).
SELECT x.name, x.tenant, x.pending, x.in_flight, x.oldest_pending_seconds
FROM (
    SELECT e.name, t.tenant, t.pending, t.in_flight, t.oldest_pending_seconds,
           row_number() OVER (PARTITION BY e.id
                              ORDER BY t.pending + t.in_flight DESC, t.tenant) AS place
    FROM outbox.endpoints e
    CROSS JOIN LATERAL (
        SELECT g.tenant, b.pending, b.in_flight, g.oldest_pending_seconds
        FROM (SELECT d.tenant,
                     greatest(0, coalesce(extract(epoch FROM clock_timestamp()
                         - min(d.created_at) FILTER (WHERE d.state = 'pending')), 0))::float8
                         AS oldest_pending_seconds
              FROM (SELECT p.tenant, p.state, p.created_at FROM outbox.deliveries p
                    WHERE p.endpoint_id = e.id AND p.state = 'pending'
                      AND p.tenant IS NOT NULL
                    UNION ALL
                    SELECT f.tenant, f.state, f.created_at FROM outbox.deliveries f
                    WHERE f.endpoint_id = e.id AND f.state = 'in_flight'
                      AND f.tenant IS NOT NULL) d
              GROUP BY d.tenant) g
        CROSS JOIN LATERAL outbox.tenant_backlog_v1(e.id, g.tenant, NULL) b
    ) AS t
    WHERE e.removed_at IS NULL
      AND (%(endpoint)s::text IS NULL OR e.name = %(endpoint)s::text)
) AS x
WHERE x.place <= %(per_endpoint)s
ORDER BY x.name, x.place;

-- name: admin_dispatchers
-- Dispatchers alive: heartbeats seen in the last 30 s (each writes one every
-- few seconds), and rows a dispatcher serving many databases wrote at its
-- look at this idle database, alive until their serves_until; whether the
-- maintainer lease is held (an earlier release's dispatchers write no
-- heartbeat but hold that lease); the problems they report, merged (endpoint
-- name -> why it cannot be served); and the processes, host and pid, each
-- once (a process serving many databases may have a row of each kind here).
WITH alive AS (
    SELECT d.host, d.pid, d.problems FROM outbox.dispatchers d
    WHERE d.seen_at > now() - interval '30 seconds' OR d.serves_until > now()
)
SELECT (SELECT count(DISTINCT (a.host, a.pid)) FROM alive a),
       (SELECT expires_at > now() FROM outbox.maintainer),
       (SELECT coalesce(jsonb_object_agg(p.key, p.value), '{}')::text
        FROM alive a, jsonb_each_text(a.problems) p),
       (SELECT coalesce(jsonb_agg(DISTINCT jsonb_build_object('host', a.host, 'pid', a.pid)),
                        '[]')::text
        FROM alive a);

-- name: admin_key_waits
-- Producers waiting for a key: publish() takes a transaction-scoped advisory
-- lock per key (class 7469813, see the publish query), so a transaction that
-- published a key and stays open makes the next publisher of that key wait.
-- How many wait now, the longest wait, and how long the oldest transaction
-- they wait for has been open. pg_locks and pg_stat_activity show other
-- users' sessions only to superusers and members of pg_read_all_stats.
WITH key_locks AS (
    SELECT l.classid, l.objid, l.granted, a.xact_start, a.state_change
    FROM pg_locks l
    JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.classid = 7469813::oid AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
),
waiting AS (SELECT * FROM key_locks WHERE NOT granted)
SELECT (SELECT count(*) FROM waiting),
       coalesce((SELECT max(extract(epoch FROM clock_timestamp() - state_change))
                 FROM waiting), 0)::float8,
       coalesce((SELECT max(extract(epoch FROM clock_timestamp() - h.xact_start))
                 FROM key_locks h
                 WHERE h.granted AND EXISTS (SELECT 1 FROM waiting w
                                             WHERE w.objid = h.objid)), 0)::float8;

-- name: admin_live_endpoint
SELECT id, enabled FROM outbox.endpoints
WHERE name = %(name)s AND removed_at IS NULL;

-- name: admin_endpoint_ever_existed
-- Dead letters outlive their endpoint (a forced removal makes them), so the
-- listing accepts the name of a removed endpoint too.
SELECT EXISTS (SELECT 1 FROM outbox.endpoints WHERE name = %(name)s);

-- name: admin_dead_list
-- Dead rows are read through deliveries_finished (state leads it; with an
-- endpoint, state and endpoint_id) and sorted newest first in a subquery of
-- their own (OFFSET 0 keeps it one), narrow rows without the event: the
-- outer nested loop then reads the events of the sorted rows one by one and
-- stops at the limit, instead of joining every dead letter's event before
-- sorting (one endpoint's 25,000 dead letters: 30 ms for a page of 50
-- against 200; BENCHMARKS.md, "The web view"). The outer ORDER BY is the
-- subquery's, which a nested loop keeps.
-- The LEFT JOIN keeps a row whose endpoint row was deleted by hand; the name
-- filter matches removed endpoints too (names are unique only among live
-- ones). The filters are dead retry's (--type, --since and --until on the
-- event), and --failed-since on the time the delivery died. A page after the
-- first (the web view's) starts below the last row of the one before: the
-- keyset (finished_at, id) in the listing's order, a row without finished_at
-- (made by hand: every statement that buries a delivery stamps it) counting
-- as the oldest.
SELECT d.event_id::text, coalesce(e.name, '#' || d.endpoint_id::text),
       e.removed_at IS NOT NULL AS removed, ev.type, d.key, d.attempts, d.last_error,
       d.last_status, d.finished_at, ev.created_at, ev.tenant, d.id
FROM (
    SELECT d.id, d.event_id, d.endpoint_id, d.key, d.attempts, d.last_error, d.last_status,
           d.finished_at, coalesce(d.finished_at, '-infinity') AS at
    FROM outbox.deliveries d
    WHERE d.state = 'dead'
      AND (%(endpoint)s::text IS NULL
           OR d.endpoint_id IN (SELECT x.id FROM outbox.endpoints x
                                WHERE x.name = %(endpoint)s::text))
      AND (%(failed_since)s::timestamptz IS NULL
           OR d.finished_at >= %(failed_since)s::timestamptz)
      AND (%(before_id)s::bigint IS NULL
           OR (coalesce(d.finished_at, '-infinity'), d.id)
              < (coalesce(%(before_at)s::timestamptz, '-infinity'), %(before_id)s::bigint))
    ORDER BY at DESC, d.id DESC
    OFFSET 0
) d
JOIN outbox.events ev ON ev.id = d.event_id
LEFT JOIN outbox.endpoints e ON e.id = d.endpoint_id
WHERE outbox.event_matches_v1(ev.type, ev.created_at, ev.tenant, %(types)s::text[],
                              %(since)s::timestamptz, %(until)s::timestamptz,
                              %(tenant)s::text)
ORDER BY d.at DESC, d.id DESC
LIMIT %(limit)s;

-- name: admin_events_list
-- `outbox events list`: events newest first (the primary key backwards: ids
-- are UUIDv7, in publish order; no index on created_at is needed), with the
-- state of each endpoint's latest delivery of the event (a replay makes a
-- second one). The filters are replay's (--type as LIKE patterns, --since and
-- --until on created_at, the database clock) and --key; since_id bounds the
-- scan from below as replay's does (ids carry the producer's clock, so with a
-- slack for it), and created_at decides. event_ids: only those events (the web
-- view's search, by primary key).
SELECT ev.id::text, ev.type, ev.key, ev.created_at,
       coalesce((SELECT jsonb_object_agg(x.name, x.state)
                 FROM (SELECT DISTINCT ON (d.endpoint_id)
                              coalesce(e.name, '#' || d.endpoint_id::text) AS name, d.state
                       FROM outbox.deliveries d
                       LEFT JOIN outbox.endpoints e ON e.id = d.endpoint_id
                       WHERE d.event_id = ev.id
                       ORDER BY d.endpoint_id, d.id DESC) x), '{}'::jsonb),
       ev.tenant
FROM outbox.events ev
WHERE (%(since_id)s::uuid IS NULL OR ev.id >= %(since_id)s::uuid)
  AND (%(event_ids)s::uuid[] IS NULL OR ev.id = ANY (%(event_ids)s::uuid[]))
  AND (%(key)s::text IS NULL OR ev.key = %(key)s::text)
  AND outbox.event_matches_v1(ev.type, ev.created_at, ev.tenant, %(types)s::text[],
                              %(since)s::timestamptz, %(until)s::timestamptz,
                              %(tenant)s::text)
ORDER BY ev.id DESC
LIMIT %(limit)s;

-- name: admin_retry_dead
-- Dead deliveries back to pending with fresh attempts (attempts_before keeps
-- counting the old ones, for the attempt history's numbering). last_error and
-- last_status stay until the next attempt overwrites them, so a retried row
-- still says why it failed before.
-- The live endpoints are locked FOR SHARE: a concurrent `endpoints remove`
-- either waits for this statement's transaction (and then finds the retried
-- rows pending, and dead-letters them again) or commits first (and its
-- endpoint no longer matches here), so no pending row is ever left on a
-- removed endpoint, where no dispatcher would claim it.
-- Every selector starts from the dead rows through deliveries_finished (state,
-- endpoint_id, ...): dead letters are few, so one statement serves all three,
-- and the filters (--type as LIKE patterns, --since/--until on the event's
-- created_at) read each dead row's event by its primary key. Dead letters the
-- filters choose whose endpoint is removed are not retried (no dispatcher
-- serves it): they come back as skipped, counted per endpoint. With dry_run
-- nothing is written and the counts say what would be.
-- A dead letter of another tenant's event at an endpoint that belongs to a
-- tenant (made by hand, or before the endpoint had its tenant) is never
-- chosen: retried, it could only die again, and it is not counted.
-- At an endpoint disabled with --drop nothing is retried (what would wait
-- there is being discarded): those are not counted, and named apart.
-- pg_notify is queued until commit: dispatchers wake only if the retry commits.
SELECT r.retried, r.eligible, r.disabled, r.skipped, r.dropping
FROM outbox.retry_dead_deliveries(%(endpoint_id)s::bigint, %(event_ids)s::uuid[],
                                  %(types)s::text[], %(since)s::timestamptz,
                                  %(until)s::timestamptz, %(tenant)s::text,
                                  %(dry_run)s::boolean) AS r;

-- name: admin_dead_discard
-- Dead letters deleted on purpose (`outbox dead discard`), chosen as dead
-- retry chooses them; their attempt history goes with them (the trigger
-- attempts_follow_deliveries). The event stays until retention finds it
-- without deliveries. With dry_run nothing is deleted.
WITH chosen AS MATERIALIZED (
    SELECT d.id
    FROM outbox.deliveries d
    JOIN outbox.events ev ON ev.id = d.event_id
    LEFT JOIN outbox.endpoints e ON e.id = d.endpoint_id
    WHERE d.state = 'dead'
      AND (%(endpoint)s::text IS NULL OR e.name = %(endpoint)s::text)
      AND (%(event_ids)s::uuid[] IS NULL OR d.event_id = ANY (%(event_ids)s::uuid[]))
      AND outbox.event_matches_v1(ev.type, ev.created_at, ev.tenant, %(types)s::text[],
                                  %(since)s::timestamptz, %(until)s::timestamptz,
                                  %(tenant)s::text)
    ORDER BY d.id  -- row locks in id order, as every writer of deliveries takes them
    FOR UPDATE OF d
),
gone AS (
    DELETE FROM outbox.deliveries d USING chosen c
    WHERE d.id = c.id AND d.state = 'dead' AND NOT %(dry_run)s::boolean
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM chosen);

-- name: admin_replay_lock
-- Replays share this lock; each purge batch of events takes it exclusively
-- (purge_events_lock). Without it a purge could decide "no delivery left" on a
-- snapshot taken before a replay committed its new delivery, delete the event,
-- and cascade the fresh delivery away. The key is fixed and differs from
-- those of migrate_lock and endpoints_admin_lock.
SELECT pg_advisory_xact_lock_shared(7469813520431);

-- name: admin_moment
-- "2h ago" is measured on the database clock, like every other time here.
SELECT coalesce(%(at)s::timestamptz, now() - %(ago)s::interval);

-- name: admin_missing_events
-- as_tenant (outbox.endpoints.replay's tenant guard; NULL for `outbox replay`):
-- another tenant's event is missing too, as an unknown one is.
SELECT given.id::text AS id
FROM unnest(%(event_ids)s::uuid[]) AS given(id)
WHERE NOT EXISTS (SELECT 1 FROM outbox.events ev
                  WHERE ev.id = given.id
                    AND (%(as_tenant)s::text IS NULL OR ev.tenant = %(as_tenant)s::text));

-- name: admin_replay
-- One new pending delivery per chosen event for one endpoint, copying seq and
-- key so that per-key ordering treats it as the event it is (an older event
-- replayed holds back later events of its key that are still waiting). An
-- event that already has a pending or in-flight delivery for the endpoint is
-- skipped: it is on its way. Replayed events stop being unrouted.
-- --since filters on created_at (the database clock), but first narrows by the
-- primary key: ids are UUIDv7 whose first 48 bits are the producer's Unix
-- milliseconds, so since_id (the smallest id of since minus an hour, which
-- tolerates producer clocks running behind the database's) starts an index
-- range scan instead of a scan of the whole table. Both come in as constants
-- (admin_replay_since) so that the planner can estimate the range.
-- The endpoint row is locked FOR SHARE (see admin_retry_dead for why).
-- An endpoint that belongs to a tenant is replayed only that tenant's events:
-- the others are not chosen, nor counted. An endpoint disabled with --drop is
-- replayed nothing (what would wait there is being discarded).
WITH target AS (
    SELECT id, enabled, tenant, dropping FROM outbox.endpoints
    WHERE id = %(endpoint_id)s AND removed_at IS NULL
    FOR SHARE
),
-- --type (LIKE patterns) and --until filter the chosen events too; fresh are
-- those not already on their way; with dry_run nothing is inserted and the
-- counts say what would be. A replayed delivery goes on numbering attempts
-- where the event's earlier deliveries to the endpoint stopped (attempts_before).
chosen AS MATERIALIZED (
    SELECT ev.id, ev.seq, ev.key, ev.tenant, ev.deliver_after
    FROM outbox.events ev
    WHERE ev.id = ANY (%(event_ids)s::uuid[])
      AND outbox.event_matches_v1(ev.type, ev.created_at, ev.tenant, %(types)s::text[],
                                  NULL, NULL, %(tenant)s::text)
      AND NOT EXISTS (SELECT 1 FROM target t
                      WHERE t.tenant IS NOT NULL
                        AND (ev.tenant IS NULL OR t.tenant OPERATOR(pg_catalog.<>) ev.tenant))
    UNION ALL
    SELECT ev.id, ev.seq, ev.key, ev.tenant, ev.deliver_after
    FROM outbox.events ev
    WHERE %(event_ids)s::uuid[] IS NULL
      AND ev.id >= %(since_id)s::uuid
      AND outbox.event_matches_v1(ev.type, ev.created_at, ev.tenant, %(types)s::text[],
                                  %(since)s::timestamptz, %(until)s::timestamptz,
                                  %(tenant)s::text)
      AND NOT EXISTS (SELECT 1 FROM target t
                      WHERE t.tenant IS NOT NULL
                        AND (ev.tenant IS NULL OR t.tenant OPERATOR(pg_catalog.<>) ev.tenant))
),
fresh AS MATERIALIZED (
    SELECT c.id, c.seq, c.key, c.tenant, c.deliver_after, t.id AS endpoint_id
    FROM chosen c, target t
    WHERE NOT t.dropping
      AND NOT EXISTS (
        SELECT 1 FROM outbox.deliveries d
        WHERE d.event_id = c.id AND d.endpoint_id = t.id AND d.state IN ('pending', 'in_flight')
    )
),
inserted AS (
    INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, tenant, next_attempt_at,
                                   attempts_before)
    SELECT f.id, f.endpoint_id, f.seq, f.key, f.tenant,
           greatest(f.deliver_after, clock_timestamp()),
           coalesce((SELECT max(p.attempts_before + p.attempts) FROM outbox.deliveries p
                     WHERE p.event_id = f.id AND p.endpoint_id = f.endpoint_id), 0)
    FROM fresh f
    WHERE NOT %(dry_run)s::boolean
    ORDER BY f.seq
    RETURNING event_id
),
-- Replayed deliveries count against a --max-pending bound (shard -1).
counted AS (
    UPDATE outbox.endpoint_backlog b
    SET undelivered = b.undelivered + (SELECT count(*) FROM inserted)
    FROM target t
    WHERE b.endpoint_id = t.id AND b.shard = -1
),
rerouted AS (
    UPDATE outbox.events ev SET unrouted = false
    FROM inserted i
    WHERE ev.id = i.event_id AND ev.unrouted
    RETURNING 1
)
-- Every column is named: outbox.endpoints.replay reads the row as a dict.
SELECT (SELECT count(*) FROM chosen) AS chosen,
       (SELECT count(*) FROM inserted) AS inserted,
       (SELECT count(*) FROM fresh) AS fresh,
       (SELECT count(*) FROM rerouted) AS rerouted,
       (SELECT enabled FROM target) AS enabled,
       (SELECT pg_notify('outbox_wakeup', '') WHERE EXISTS (SELECT 1 FROM inserted)) AS woke,
       (SELECT dropping FROM target) AS dropping;

-- name: purge_start
-- The cutoff on the database clock, fixed once so that every batch agrees, and
-- the endpoints whose delivered rows to visit (removed ones too).
SELECT now() - %(older_than)s::interval, ARRAY(SELECT id FROM outbox.endpoints ORDER BY id);

-- name: purge_would_delete
-- What `outbox purge --dry-run` reports, deleting nothing: with purge_start's
-- cutoff, the delivered and the discarded deliveries finished before it (each
-- state through its own index), and the events published before it (by id
-- bound and by created_at, as purge_events_batch judges) whose every delivery
-- is one of those.
SELECT (SELECT count(*) FROM outbox.deliveries d
        WHERE d.state = 'delivered' AND d.finished_at < %(cutoff)s)
       + (SELECT count(*) FROM outbox.deliveries d
          WHERE d.state = 'discarded' AND d.finished_at < %(cutoff)s),
       (SELECT count(*) FROM outbox.events ev
        WHERE ev.id < %(bound)s::uuid AND ev.created_at < %(cutoff)s
          AND NOT EXISTS (SELECT 1 FROM outbox.deliveries d
                          WHERE d.event_id = ev.id
                            AND NOT (d.state IN ('delivered', 'discarded')
                                     AND d.finished_at < %(cutoff)s)));

-- name: purge_finished_batch
-- One endpoint at a time: deliveries_finished is (state, endpoint_id,
-- finished_at), so "this endpoint's delivered rows older than the cutoff" is
-- one tight index range; deliveries_discarded, (endpoint_id, finished_at)
-- partial on the state, is the same for the rows discarded by the endpoint's
-- policy. Each state is its own arm, the state written out, so that each
-- reads its own partial index (a state given as a parameter would match
-- neither in a generic plan). Without endpoint_id the scan would wade, batch
-- after batch, through the recent rows of every endpoint before the current
-- one. The CTEs fix the LIMIT (PostgreSQL bug #15715); SKIP LOCKED lets two
-- dispatchers purge side by side without waiting on each other. Returns how
-- many of each went: the caller goes on while either arm filled its batch.
WITH delivered AS (
    SELECT id FROM outbox.deliveries
    WHERE state = 'delivered' AND endpoint_id = %(endpoint_id)s
      AND finished_at < %(cutoff)s
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
discarded AS (
    SELECT id FROM outbox.deliveries
    WHERE state = 'discarded' AND endpoint_id = %(endpoint_id)s
      AND finished_at < %(cutoff)s
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM outbox.deliveries d
    WHERE d.id = ANY (ARRAY(SELECT id FROM delivered UNION ALL SELECT id FROM discarded))
    RETURNING d.state
)
SELECT count(*) FILTER (WHERE state = 'delivered'),
       count(*) FILTER (WHERE state = 'discarded')
FROM gone;

-- name: purge_events_lock
-- Taken in its own statement, before purge_events_batch takes its snapshot:
-- once we hold it, every replay has either committed (and its deliveries are
-- visible to the next statement) or not started. See admin_replay_lock.
SELECT pg_advisory_xact_lock(7469813520431);

-- name: purge_events_batch
-- Walks the events primary key from the previous batch's last id (a keyset
-- cursor, so events kept for their dead letters are stepped over once, not
-- rescanned every batch) up to the smallest UUIDv7 of the cutoff's
-- millisecond: ids carry the producer's clock, so id < bound means "published
-- before the cutoff" without an index on created_at. created_at (the database
-- clock) is checked too, so a producer clock running ahead never gets an event
-- deleted early. Events that still have any delivery (pending, in flight,
-- dead, or delivered but recent) are kept.
WITH scanned AS (
    SELECT id FROM outbox.events
    WHERE id > %(after)s::uuid AND id < %(bound)s::uuid
    ORDER BY id
    LIMIT %(batch_size)s
),
gone AS (
    DELETE FROM outbox.events ev USING scanned s
    WHERE ev.id = s.id AND ev.created_at < %(cutoff)s
      AND NOT EXISTS (SELECT 1 FROM outbox.deliveries d WHERE d.event_id = ev.id)
    RETURNING 1
)
SELECT (SELECT count(*) FROM scanned),
       (SELECT s.id FROM scanned s ORDER BY s.id DESC LIMIT 1)::text,
       (SELECT count(*) FROM gone);

-- name: grants_roles
-- What `outbox grants --apply` checks first: the schema's owner, who we are,
-- which of the named roles owns the schema (it must not be named), and which
-- do not exist.
SELECT n.nspowner::regrole::text AS owner, current_user::text AS me,
       (SELECT string_agg(r.rolname, ', ') FROM pg_catalog.pg_roles r
        WHERE r.oid = n.nspowner AND r.rolname = ANY (%(roles)s::text[])) AS owned,
       (SELECT array_agg(DISTINCT x.name) FROM unnest(%(roles)s::text[]) AS x(name)
        WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = x.name))
           AS missing
FROM pg_catalog.pg_namespace n WHERE n.nspname = 'outbox';

-- name: grants_recorded
-- The roles `outbox grants` granted before, each kind a row, and whether the
-- role still exists.
SELECT g.role, g.kind,
       EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) g.role)
FROM outbox.grantees g
ORDER BY g.role, g.kind;

-- name: grants_held
-- Each privilege the roles (PUBLIC among them) hold in the outbox schema: on
-- the schema, its tables and views, their columns, its functions. A NULL ACL
-- is the default one (an owner's all, PUBLIC's EXECUTE on a function).
-- `outbox grants --check` reads it before and after applying the grants, in a
-- transaction it rolls back: what appeared is what was missing.
WITH who AS (
    SELECT r.oid, r.rolname::text AS name FROM pg_catalog.pg_roles r
    WHERE r.rolname OPERATOR(pg_catalog.=) ANY (%(roles)s::text[])
    UNION ALL
    SELECT 0::oid, 'PUBLIC'
)
SELECT w.name, a.privilege_type, NULL::text, 'SCHEMA outbox'
FROM pg_catalog.pg_namespace n
CROSS JOIN LATERAL pg_catalog.aclexplode(
    coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a
JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox'
UNION ALL
SELECT w.name, a.privilege_type, NULL::text, c.oid::regclass::text
FROM pg_catalog.pg_class c
CROSS JOIN LATERAL pg_catalog.aclexplode(
    coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner))) a
JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
WHERE c.relnamespace OPERATOR(pg_catalog.=) 'outbox'::regnamespace
  AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'v', 'p']::"char"[])
UNION ALL
SELECT w.name, a.privilege_type, att.attname::text, c.oid::regclass::text
FROM pg_catalog.pg_attribute att
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) att.attrelid
CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
WHERE c.relnamespace OPERATOR(pg_catalog.=) 'outbox'::regnamespace
  AND att.attnum OPERATOR(pg_catalog.>) 0 AND NOT att.attisdropped
UNION ALL
SELECT w.name, a.privilege_type, NULL::text, 'FUNCTION ' OPERATOR(pg_catalog.||)
                                             p.oid::regprocedure::text
FROM pg_catalog.pg_proc p
CROSS JOIN LATERAL pg_catalog.aclexplode(
    coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
JOIN who w ON w.oid OPERATOR(pg_catalog.=) a.grantee
WHERE p.pronamespace OPERATOR(pg_catalog.=) 'outbox'::regnamespace;
