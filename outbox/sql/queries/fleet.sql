-- name: database_due
-- A database served by no pinned connection, looked at through a short-lived
-- one: when its next delivery comes due (NULL: nothing waits; parked keys at
-- 'infinity' and disabled or removed endpoints' rows do not count), whether a
-- lease ran out (a dispatcher died holding it), and the database's clock. One
-- look per endpoint down deliveries_pending, so a backlog costs no scan.
-- An endpoint's policy makes work due now, whatever its deliveries' times, so
-- that a site's maintainer applies it (discard_over): one disabled with --drop
-- that has a pending delivery, one whose backlog drops its oldest past a
-- bound (backlog_over_v1). Only endpoints with such a policy are read.
SELECT least((SELECT pg_catalog.min(n.next_attempt_at)
              FROM outbox.endpoints e
              CROSS JOIN LATERAL (
                  SELECT d.next_attempt_at
                  FROM outbox.deliveries d
                  WHERE d.endpoint_id = e.id AND d.state = 'pending'
                    AND d.next_attempt_at < 'infinity'
                  ORDER BY d.next_attempt_at
                  LIMIT 1
              ) n
              WHERE e.enabled AND e.removed_at IS NULL),
             (SELECT pg_catalog.now()
              WHERE EXISTS (
                  SELECT FROM outbox.endpoints e
                  WHERE e.removed_at IS NULL
                    AND ((e.dropping
                          AND EXISTS (SELECT FROM outbox.deliveries d
                                      WHERE d.endpoint_id = e.id AND d.state = 'pending'))
                         OR (e.when_full = 'drop-oldest'
                             AND EXISTS (SELECT FROM outbox.backlog_over_v1(
                                             e.id, e.max_pending, e.max_pending_per_tenant) b
                                         WHERE b.over)))))),
       EXISTS (SELECT FROM outbox.deliveries d
               WHERE d.state = 'in_flight' AND d.lease_expires_at < pg_catalog.now()),
       pg_catalog.now();

-- name: databases_activity
-- The hint of a server's databases: rows inserted in each since the server
-- started (publish() inserts, the dispatcher's looks do not). One read per
-- server tells which of its databases had a commit worth a look.
SELECT s.datname::text, s.tup_inserted
FROM pg_catalog.pg_stat_database s
WHERE s.datname IS NOT NULL;

-- name: fleet_beat
-- A dispatcher serving many databases is alive: its session in the home
-- database carries its fleet, its id and the moment of its last beat (the
-- database's clock) in application_name, which every role may read in
-- pg_stat_activity. No table, no write; a session that ends takes it along.
SELECT pg_catalog.set_config(
    'application_name',
    %(prefix)s::text
        || pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.now()))::bigint::text,
    false);

-- name: fleet_members
-- The members of a fleet whose last beat is younger than the lease: the ids
-- to hash the databases over. Only sessions logged in as this session's own
-- role count: application_name is anyone's to set, and a session of another
-- role that copied a member's (with an id that wins the databases it wants
-- starved) would move them away from every real member. usesysid is the
-- role a session logged in as, which SET ROLE does not change: session_user,
-- not current_user, is the one to compare it with. A beat from the future,
-- beyond a small skew (every beat is read from this same clock), counts
-- neither: it would keep a member alive long after its last beat.
-- The beat is read through a CASE: the planner may order a WHERE's conditions
-- as it likes, so a cast guarded only by a sibling condition could meet a
-- name that is not a number (and fail the whole read).
SELECT DISTINCT m.id
FROM (SELECT pg_catalog.split_part(a.application_name, ' ', 4) AS id,
             CASE WHEN pg_catalog.split_part(a.application_name, ' ', 5)
                       OPERATOR(pg_catalog.~) '^[0-9]{1,12}$'
                  THEN pg_catalog.split_part(a.application_name, ' ', 5)::bigint::float8
             END AS beat
      FROM pg_catalog.pg_stat_activity a
      WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
        AND a.usesysid OPERATOR(pg_catalog.=) (SELECT r.oid FROM pg_catalog.pg_roles r
                                               WHERE r.rolname OPERATOR(pg_catalog.=) session_user)
        AND a.application_name OPERATOR(pg_catalog.~~) %(pattern)s::text) m
WHERE m.beat OPERATOR(pg_catalog.>) (pg_catalog.date_part('epoch', pg_catalog.now())::float8
                                     OPERATOR(pg_catalog.-) %(lease)s::float8)
  AND m.beat OPERATOR(pg_catalog.<=) (pg_catalog.date_part('epoch', pg_catalog.now())::float8
                                      OPERATOR(pg_catalog.+) %(skew)s::float8);

-- name: served_by
-- A look at a database served by no pinned connection: this dispatcher
-- serves it, and vouches for that until serves_until (its next look is due
-- well before), so that `outbox status` names it there rather than saying
-- that nothing is delivered. One row per process (its id is the process's,
-- the same in every database), updated in place (HOT: no index covers the
-- times). Rows of processes gone for an hour go at the same time: a database
-- that is never busy never has a maintainer to sweep them.
WITH gone AS (
    DELETE FROM outbox.dispatchers
    WHERE coalesce(serves_until, seen_at) < pg_catalog.now() - interval '1 hour'
)
INSERT INTO outbox.dispatchers (id, host, pid, version, serves_until)
VALUES (%(me)s, %(host)s, %(pid)s, %(version)s,
        pg_catalog.now() + pg_catalog.make_interval(secs => %(seconds)s::float8))
ON CONFLICT (id) DO UPDATE SET seen_at = pg_catalog.now(),
                               serves_until = EXCLUDED.serves_until;
