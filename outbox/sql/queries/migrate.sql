-- name: migrate_lock
-- Held until the migrating transaction ends; the key is arbitrary but fixed.
-- Tried, not waited for: any role may take an advisory lock, so a migrator
-- polls for its turn until a deadline and then names who holds it.
SELECT pg_try_advisory_xact_lock(7469813520411);

-- name: migrate_session_lock
-- The same key, for a step that runs outside a transaction.
SELECT pg_try_advisory_lock(7469813520411);

-- name: migrate_holders
-- Who holds the migrators' lock (pg_locks splits a bigint key into its high
-- and low 32 bits), for the message of a migrator that gave up waiting.
SELECT coalesce(string_agg(l.pid::text, ', ' ORDER BY l.pid), '')
FROM pg_catalog.pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid = (7469813520411 >> 32)::oid
  AND l.objid = (7469813520411 & 4294967295)::oid;

-- name: migrate_role
-- Who migrates, and whose the outbox schema is (NULL: not made yet).
SELECT current_user::text, r.rolsuper,
       (SELECT n.nspowner::regrole::text FROM pg_catalog.pg_namespace n
        WHERE n.nspname = 'outbox') AS owner
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user;

-- name: migrate_session_unlock
SELECT pg_advisory_unlock(7469813520411);

-- name: set_lock_timeout
-- A step gives up its lock waits after this, rather than queue publish()
-- behind it for long; for its transaction only (local), or for the session
-- while a step that runs outside a transaction goes on.
SELECT set_config('lock_timeout', %(lock_timeout)s, %(local)s);

-- name: schema_exists
SELECT to_regclass('outbox.schema_version') IS NOT NULL;

-- name: schema_objects
-- What is there, from the catalogue alone: to_regclass looks names up
-- without locking the tables (an already current database is never locked).
SELECT to_regclass('outbox.schema_version') IS NOT NULL AS versions,
       to_regclass('outbox.endpoints') IS NOT NULL AS outbox,
       to_regclass('outbox.inbox') IS NOT NULL AS inbox;

-- name: schema_version
SELECT coalesce(max(version), 0) FROM outbox.schema_version;

-- name: schema_versions
-- The only outbox table an up-to-date check reads (ACCESS SHARE on it, which
-- conflicts with nothing but ACCESS EXCLUSIVE, and nothing takes that here).
SELECT coalesce(array_agg(version ORDER BY version), '{}') FROM outbox.schema_version;

-- name: record_version
INSERT INTO outbox.schema_version (version) VALUES (%(version)s) ON CONFLICT DO NOTHING;

-- name: version_table
-- What `outbox migrate --inbox-only` makes before the inbox steps: the
-- schema and the version bookkeeping, as schema.sql makes them.
DO $$
BEGIN
    IF to_regnamespace('outbox') IS NULL THEN
        CREATE SCHEMA outbox;
    END IF;
END
$$;
CREATE TABLE IF NOT EXISTS outbox.schema_version (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
