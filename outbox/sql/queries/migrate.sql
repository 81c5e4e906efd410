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

-- name: schema_objects
-- What is there, from the catalogue alone: to_regclass looks names up
-- without locking the tables (an already current database is never locked).
SELECT to_regclass('outbox.schema_version') IS NOT NULL AS versions,
       to_regclass('outbox.endpoints') IS NOT NULL AS outbox,
       to_regclass('outbox.inbox') IS NOT NULL AS inbox;

-- name: dispatcher_privileges
-- What the dispatcher's role lacks of the privileges it uses, one text per
-- privilege (empty: nothing; also empty without a schema outbox, which the
-- schema check then reports). The same list as the dispatcher's part of
-- grants.sql (a test keeps them equal), retention's DELETEs included: checked
-- at start, so that a role without its grants waits, not ready, naming them,
-- instead of failing at the first statement that needs one. Tables are found
-- in the catalogue (no lookup through a schema we may not use); tables and
-- columns of later versions that are not there yet are the schema check's to
-- report.
WITH needed (relname, privilege, columns) AS (VALUES
    ('schema_version', 'SELECT', NULL::text[]),
    ('endpoints', 'SELECT', NULL),
    ('endpoints', 'UPDATE', ARRAY['enabled', 'disabled_reason', 'disabled_by', 'updated_at']),
    ('events', 'SELECT', NULL), ('events', 'DELETE', NULL),
    ('deliveries', 'SELECT', NULL), ('deliveries', 'UPDATE', NULL),
    ('deliveries', 'DELETE', NULL),
    ('attempts', 'SELECT', NULL), ('attempts', 'INSERT', NULL), ('attempts', 'DELETE', NULL),
    ('dispatchers', 'SELECT', NULL), ('dispatchers', 'INSERT', NULL),
    ('dispatchers', 'UPDATE', NULL), ('dispatchers', 'DELETE', NULL),
    ('endpoint_state', 'SELECT', NULL), ('endpoint_state', 'UPDATE', NULL),
    ('endpoint_slots', 'SELECT', NULL), ('endpoint_slots', 'UPDATE', NULL),
    ('endpoint_backlog', 'SELECT', NULL), ('endpoint_backlog', 'UPDATE', NULL),
    ('maintainer', 'SELECT', NULL), ('maintainer', 'UPDATE', NULL)
),
schema AS (
    SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = 'outbox'
)
SELECT current_user::text,
       CASE WHEN NOT EXISTS (SELECT 1 FROM schema) THEN ARRAY[]::text[]
            WHEN NOT has_schema_privilege((SELECT oid FROM schema), 'USAGE')
                THEN ARRAY['USAGE on schema outbox']
            ELSE ARRAY(
                SELECT w.privilege || coalesce(' (' || array_to_string(w.columns, ', ') || ')', '')
                       || ' on outbox.' || w.relname
                FROM needed w
                JOIN pg_catalog.pg_class c
                  ON c.relname = w.relname AND c.relnamespace = (SELECT oid FROM schema)
                WHERE CASE WHEN w.columns IS NULL
                           THEN NOT has_table_privilege(c.oid, w.privilege)
                           ELSE EXISTS (SELECT 1 FROM unnest(w.columns) AS col(name)
                                        JOIN pg_catalog.pg_attribute a
                                          ON a.attrelid = c.oid AND a.attname = col.name
                                             AND NOT a.attisdropped
                                        WHERE NOT has_column_privilege(c.oid, a.attnum,
                                                                       w.privilege))
                      END
                UNION ALL
                -- The fleet's rule functions its statements call (grants.sql).
                SELECT 'EXECUTE on ' || p.oid::regprocedure::text
                FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = (SELECT oid FROM schema) AND p.proname ~ '_v[0-9]+$'
                  AND NOT has_function_privilege(p.oid, 'EXECUTE'))
       END;

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
    applied_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- name: writable_paths
-- The schemas a role that uses the outbox (USAGE on it, not its owner: the
-- application, the dispatcher, a viewer) finds on its default search_path
-- (its own setting in this database, else its own, else the database's, else
-- the server's; "$user" is its name) in which some other role may create:
-- the schema's owner (pg_database_owner: the database's), or a role (or
-- PUBLIC) granted CREATE. What such a role creates there can stand in for a
-- built-in operator or function in that role's sessions, and run with its
-- rights. Superusers and pg_catalog, pg_temp and outbox itself are left out.
-- One row per schema: the roles that search it, the roles that may create in it.
WITH db AS (
    SELECT d.oid, d.datdba FROM pg_catalog.pg_database d
    WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
),
users AS (
    SELECT DISTINCT a.grantee AS role
    FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
    WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox' AND a.privilege_type OPERATOR(pg_catalog.=) 'USAGE'
      AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner AND a.grantee OPERATOR(pg_catalog.<>) 0::oid
),
settings AS (
    SELECT s.setrole, s.setdatabase, pg_catalog.substr(c, 13) AS path
    FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) c
    WHERE c OPERATOR(pg_catalog.~~) 'search\_path=%'
),
paths AS (
    SELECT u.role, coalesce(
        (SELECT s.path FROM settings s, db WHERE s.setrole OPERATOR(pg_catalog.=) u.role
           AND s.setdatabase OPERATOR(pg_catalog.=) db.oid),
        (SELECT s.path FROM settings s WHERE s.setrole OPERATOR(pg_catalog.=) u.role
           AND s.setdatabase OPERATOR(pg_catalog.=) 0::oid),
        (SELECT s.path FROM settings s, db WHERE s.setrole OPERATOR(pg_catalog.=) 0::oid
           AND s.setdatabase OPERATOR(pg_catalog.=) db.oid),
        (SELECT g.boot_val FROM pg_catalog.pg_settings g
         WHERE g.name OPERATOR(pg_catalog.=) 'search_path')) AS path
    FROM users u
),
searched AS (
    SELECT p.role, CASE WHEN pg_catalog.btrim(e) OPERATOR(pg_catalog.=) ANY ('{$user,"\"$user\""}')
                        THEN pg_catalog.pg_get_userbyid(p.role)::text
                        WHEN pg_catalog.btrim(e) OPERATOR(pg_catalog.~~) '"%'
                        THEN pg_catalog.btrim(pg_catalog.btrim(e), '"')
                        ELSE pg_catalog.lower(pg_catalog.btrim(e)) END AS schema
    FROM paths p, pg_catalog.unnest(pg_catalog.string_to_array(p.path, ',')) e
),
creators AS (
    SELECT n.oid, n.nspname,
           CASE WHEN n.nspowner OPERATOR(pg_catalog.=) 'pg_database_owner'::regrole
                THEN (SELECT datdba FROM db) ELSE n.nspowner END AS creator
    FROM pg_catalog.pg_namespace n
    UNION
    SELECT n.oid, n.nspname,
           CASE WHEN a.grantee OPERATOR(pg_catalog.=) 'pg_database_owner'::regrole
                THEN (SELECT datdba FROM db) ELSE a.grantee END
    FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
    WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
),
risky AS (
    SELECT c.nspname, s.role, c.creator
    FROM searched s
    JOIN creators c ON c.nspname OPERATOR(pg_catalog.=) s.schema
    LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) c.creator
    WHERE c.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,pg_temp,outbox}')
      AND c.creator OPERATOR(pg_catalog.<>) s.role AND NOT coalesce(r.rolsuper, false)
)
SELECT k.nspname::text,
       pg_catalog.array_agg(DISTINCT pg_catalog.pg_get_userbyid(k.role)::text),
       pg_catalog.array_agg(DISTINCT CASE WHEN k.creator OPERATOR(pg_catalog.=) 0::oid
                                          THEN 'PUBLIC'
                                          ELSE pg_catalog.pg_get_userbyid(k.creator)::text END)
FROM risky k
GROUP BY k.nspname
ORDER BY k.nspname;

-- name: session_search_path
-- The session's search_path as it is, to be set again when migrate() is done.
SELECT pg_catalog.current_setting('search_path');

-- name: set_search_path
-- migrate()'s pin (pg_catalog, pg_temp) and its undoing, for the session: not
-- SET LOCAL, because schema.sql, run inside migrate's transaction, keeps the
-- path it finds and sets it again at session level, which would turn a local
-- pin into the session's path at commit.
SELECT pg_catalog.set_config('search_path', %(search_path)s, false);

-- name: script_pin_search_path
-- The first statement of each step of `outbox migrate --sql` (and of
-- schema.sql, which holds the same): names resolve in pg_catalog alone,
-- whatever the session's path holds, so that nothing planted on it is bound
-- into the schema; the session's path waits in outbox.saved_search_path.
DO $pin$
BEGIN
    PERFORM pg_catalog.set_config('outbox.saved_search_path',
                                  pg_catalog.current_setting('search_path'), false);  --
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);  --
END  -- (one statement: only its last line ends with a semicolon, for tools that split there)
$pin$;

-- name: script_unpin_search_path
-- The last statement of each step of `outbox migrate --sql` (and of
-- schema.sql): the session's search_path as it was before the step.
DO $unpin$
BEGIN
    PERFORM pg_catalog.set_config('search_path',
                                  pg_catalog.current_setting('outbox.saved_search_path'), false);  --
    PERFORM pg_catalog.set_config('outbox.saved_search_path', '', false);  --
END  -- (one statement: only its last line ends with a semicolon)
$unpin$;

-- name: bound_outside
-- The objects of the outbox schema bound to a function, operator, type,
-- collation, operator class or cast of a schema other than pg_catalog and
-- outbox: a constraint, a column (its type, its collation), a column's
-- default, an index (expressions, predicate, operator classes), a trigger, a
-- view's rule, a row security policy, a function (its argument and result
-- types; an SQL-standard body, whatever it names), a type. Such an object was
-- made on a search_path where another role's look-alike stood in for a
-- built-in (public.>(double precision, integer) for `timeout_seconds > 0`),
-- and runs it in every statement that meets it, with that statement's
-- rights; revoking CREATE later unbinds nothing. pg_depend records nothing
-- on the built-ins (they are pinned), so every row here is someone's making.
-- One row per object and what it uses: pg_identify_object names both with
-- their schemas, whatever the path.
WITH schema AS (
    SELECT n.oid FROM pg_catalog.pg_namespace n
    WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox'
),
relations AS (
    SELECT c.oid FROM pg_catalog.pg_class c
    WHERE c.relnamespace OPERATOR(pg_catalog.=) (SELECT oid FROM schema)
),
objects (catalog, oid) AS (
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, r.oid FROM relations r
    UNION ALL
    SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, k.oid
    FROM pg_catalog.pg_constraint k
    WHERE k.connamespace OPERATOR(pg_catalog.=) (SELECT oid FROM schema)
    UNION ALL
    SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, a.oid
    FROM pg_catalog.pg_attrdef a JOIN relations r ON r.oid OPERATOR(pg_catalog.=) a.adrelid
    UNION ALL
    SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, t.oid
    FROM pg_catalog.pg_trigger t JOIN relations r ON r.oid OPERATOR(pg_catalog.=) t.tgrelid
    UNION ALL
    SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, w.oid
    FROM pg_catalog.pg_rewrite w JOIN relations r ON r.oid OPERATOR(pg_catalog.=) w.ev_class
    UNION ALL
    SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid
    FROM pg_catalog.pg_policy p JOIN relations r ON r.oid OPERATOR(pg_catalog.=) p.polrelid
    UNION ALL
    SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, f.oid FROM pg_catalog.pg_proc f
    WHERE f.pronamespace OPERATOR(pg_catalog.=) (SELECT oid FROM schema)
    UNION ALL
    SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, y.oid FROM pg_catalog.pg_type y
    WHERE y.typnamespace OPERATOR(pg_catalog.=) (SELECT oid FROM schema)
),
used AS (
    SELECT d.classid, d.objid, d.objsubid, d.refclassid, d.refobjid,
           -- A cast has no schema of its own: its function's.
           coalesce(x.schema, (SELECT n.nspname::text
                               FROM pg_catalog.pg_cast k
                               JOIN pg_catalog.pg_proc f ON f.oid OPERATOR(pg_catalog.=) k.castfunc
                               JOIN pg_catalog.pg_namespace n
                                 ON n.oid OPERATOR(pg_catalog.=) f.pronamespace
                               WHERE k.oid OPERATOR(pg_catalog.=) d.refobjid
                                 AND d.refclassid OPERATOR(pg_catalog.=)
                                     'pg_catalog.pg_cast'::pg_catalog.regclass)) AS schema
    FROM objects b
    JOIN pg_catalog.pg_depend d
      ON d.classid OPERATOR(pg_catalog.=) b.catalog AND d.objid OPERATOR(pg_catalog.=) b.oid
    CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.refclassid, d.refobjid, 0) x
    WHERE d.refclassid OPERATOR(pg_catalog.=) ANY (
        '{pg_catalog.pg_proc, pg_catalog.pg_operator, pg_catalog.pg_type,
          pg_catalog.pg_collation, pg_catalog.pg_opclass, pg_catalog.pg_opfamily,
          pg_catalog.pg_cast, pg_catalog.pg_ts_config, pg_catalog.pg_ts_dict,
          pg_catalog.pg_conversion}'::pg_catalog.regclass[])
)
SELECT DISTINCT pg_catalog.concat_ws(' ', o.type, o.identity) AS object,
       pg_catalog.concat_ws(' ', r.type, r.identity) AS uses
FROM used u
CROSS JOIN LATERAL pg_catalog.pg_identify_object(u.classid, u.objid, u.objsubid) o
CROSS JOIN LATERAL pg_catalog.pg_identify_object(u.refclassid, u.refobjid, 0) r
WHERE u.schema OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,outbox}')
ORDER BY 1, 2;
