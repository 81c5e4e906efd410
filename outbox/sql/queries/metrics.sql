-- name: backlog
-- The gauges of the fleet's shared state, measured at scrape time: per live
-- endpoint, whether its circuit is open (or half-open), and how many
-- deliveries wait (state 'pending') and how old, on the database clock, the
-- oldest of them is (counted from when the delivery was created, so a
-- delayed event's delay counts too). Disabled endpoints are included: their
-- deliveries wait, and that is worth seeing.
-- Why LATERAL: the sub-select runs once per endpoint with a fixed endpoint_id
-- and state = 'pending', which matches the partial index deliveries_pending,
-- so it reads only that endpoint's waiting rows, never the delivered and dead
-- history that makes up most of the table. An endpoint with nothing pending
-- still gets its row (count 0, age 0) so that its series stays continuous.
-- The same rows counted per tenant (deliveries without one are one tenant, as
-- in the claim's rounds) give how many tenants have due work and the largest
-- one's backlog: no tenant appears as a label (their number is the users'
-- customers'), and the count costs what the endpoint's count costs, one pass
-- over its pending rows (deliveries_turns is ordered by tenant).
-- Whether the endpoint is enabled: an operator's disable and a 410 Gone both
-- leave it false, and its deliveries wait until it is enabled. Last, what
-- outbox_endpoint_info says of it: its tenant ('' for none) and who disabled
-- it ('' while enabled). An endpoint disabled without disabled_by (a 410 seen
-- by a dispatcher of the release before it, during a rolling upgrade) is named
-- by its reason, as the step that added the column named the older ones.
SELECT e.name,
       p.pending,
       greatest(coalesce(extract(epoch FROM clock_timestamp() - p.oldest), 0), 0)::float8
           AS oldest_seconds,
       coalesce(s.circuit, 'closed') AS circuit,
       e.max_pending,
       p.tenants_due,
       p.largest_tenant,
       e.enabled,
       coalesce(e.tenant, '') AS tenant,
       CASE WHEN e.enabled THEN ''
            ELSE coalesce(e.disabled_by,
                          CASE WHEN starts_with(e.disabled_reason, '410 Gone') THEN 'gone'
                               ELSE 'operator' END)
       END AS disabled_by
FROM outbox.endpoints AS e
LEFT JOIN outbox.endpoint_state AS s ON s.endpoint_id = e.id
CROSS JOIN LATERAL (
    SELECT coalesce(sum(t.pending), 0)::bigint AS pending, min(t.oldest) AS oldest,
           count(*) FILTER (WHERE t.due <= now()) AS tenants_due,
           coalesce(max(t.pending), 0)::bigint AS largest_tenant
    FROM (SELECT count(*) AS pending, min(d.created_at) AS oldest,
                 min(d.next_attempt_at) AS due
          FROM outbox.deliveries AS d
          WHERE d.endpoint_id = e.id AND d.state = 'pending'
          GROUP BY d.tenant) AS t
) AS p
WHERE e.removed_at IS NULL
ORDER BY e.name;

-- name: horizon
-- The oldest transaction id this database's vacuum must still respect: while
-- it lives, no dead version of a delivery newer than it can be removed, and
-- every claim steps over them. What holds it, as PostgreSQL computes the
-- horizon of an ordinary table (ComputeXidHorizons in procarray.c):
-- - backends of this database: their snapshot (backend_xmin) or, for a
--   transaction that has written, its own id (backend_xid), the older one;
--   backends of no database too, which is what a walsender relaying a
--   standby's hot_standby_feedback is. Backends running a (non-FULL) VACUUM
--   are left out, as PostgreSQL leaves them out: they are the pids of
--   pg_stat_progress_vacuum. This session (the one measuring) is left out.
-- - replication slots' xmin, whichever database they belong to (a slot's
--   catalog_xmin holds back only the system catalogs, not the outbox tables);
-- - prepared transactions of this database (PREPARE TRANSACTION).
-- Every column read here is shown to any role: pid, usename, application_name,
-- backend_xmin and backend_xid of other roles' sessions, slots and prepared
-- transactions. xact_start is not (it is NULL for another role's session unless
-- ours is a member of pg_read_all_stats, which pg_monitor includes), so
-- open_seconds may be NULL (kept NULL: greatest() would make it 0). One row, the
-- oldest holder, or none.
-- Ties: a transaction that has written drags every newer snapshot's xmin to
-- its own id, so the holder of an id is named before the snapshots that merely
-- see it running; then the longest open, then the lowest pid.
-- Shared by the outbox_db_horizon_* gauges and `outbox status`, so that both
-- name the same horizon. pg_stat_activity is read from shared memory: cheap.
WITH holders AS (
    SELECT 'backend' AS source, a.pid, a.usename::text AS role, a.application_name,
           NULL::text AS name, h.xid, coalesce(a.backend_xid = h.xid, false) AS own,
           extract(epoch FROM clock_timestamp() - a.xact_start) AS open_seconds
    FROM pg_stat_activity AS a
    CROSS JOIN LATERAL (
        SELECT CASE WHEN a.backend_xmin IS NULL
                      OR age(a.backend_xid) > age(a.backend_xmin) THEN a.backend_xid
                    ELSE a.backend_xmin END AS xid
    ) AS h
    WHERE h.xid IS NOT NULL
      AND a.pid <> pg_backend_pid()
      AND (a.datid IS NULL
           OR a.datid = (SELECT oid FROM pg_database WHERE datname = current_database()))
      AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_vacuum AS v WHERE v.pid = a.pid)
    UNION ALL
    SELECT 'slot', s.active_pid, NULL, NULL, s.slot_name::text, s.xmin, true, NULL
    FROM pg_replication_slots AS s
    WHERE s.xmin IS NOT NULL
    UNION ALL
    SELECT 'prepared', NULL, p.owner::text, NULL, p.gid, p.transaction, true,
           extract(epoch FROM clock_timestamp() - p.prepared)
    FROM pg_prepared_xacts AS p
    WHERE p.database = current_database()
)
SELECT source, pid, role, application_name, name, xid::text::bigint AS xid,
       age(xid)::bigint AS age_xids,
       (CASE WHEN open_seconds < 0::numeric THEN 0 ELSE open_seconds END)::float8 AS open_seconds
FROM holders
ORDER BY age(xid) DESC, own DESC, open_seconds DESC NULLS LAST, pid
LIMIT 1;
