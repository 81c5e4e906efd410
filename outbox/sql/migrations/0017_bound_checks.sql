-- Version 17: the CHECKs of the endpoints and their fleet state, and the
-- columns' time defaults, made again with pg_catalog's operators and
-- functions where the catalogue shows them bound to ones of another schema.
-- Before this version the script of `outbox migrate --sql`, `psql -f
-- schema.sql` and the Python migrate ran on the session's search_path: a
-- look-alike planted there (public.>(double precision, integer) is a better
-- match for `timeout_seconds > 0` than the built-in, which casts first; with
-- public named before pg_catalog, public.now() and public.=(text, text) too)
-- was bound into the constraint or default, and ran inside every statement
-- that wrote the table, with the writer's rights. Every route now pins its
-- path and schema.sql names pg_catalog's; this heals a database made before.
-- What it does not heal (an index predicate, a CHECK of the big tables,
-- anything else) `outbox migrate --check` names, with the way to repair it.
--
-- Locks: none where nothing is bound (every database `outbox migrate` made):
-- the catalogue alone is read. Where something is, ALTER TABLE takes the
-- table's ACCESS EXCLUSIVE lock for a moment, under the migrator's
-- lock_timeout: SET DEFAULT changes only the catalogue, and a CHECK added
-- again scans the endpoints or their state rows (a row per endpoint). The
-- constraints keep their names and meaning: the previous release sees no change.
DO $heal$
DECLARE
    bound record;
BEGIN
    FOR bound IN
        WITH wanted (tab, kind, name, definition) AS (VALUES
            ('endpoints', 'check', 'endpoints_max_attempts_check',
             'CHECK (max_attempts OPERATOR(pg_catalog.>=) 1)'),
            ('endpoints', 'check', 'endpoints_timeout_seconds_check',
             'CHECK (timeout_seconds OPERATOR(pg_catalog.>) 0)'),
            ('endpoints', 'check', 'endpoints_min_backoff_seconds_check',
             'CHECK (min_backoff_seconds OPERATOR(pg_catalog.>=) 0)'),
            ('endpoints', 'check', 'endpoints_max_backoff_seconds_check',
             'CHECK (max_backoff_seconds OPERATOR(pg_catalog.>=) min_backoff_seconds)'),
            ('endpoints', 'check', 'endpoints_max_in_flight_check',
             'CHECK (max_in_flight OPERATOR(pg_catalog.>=) 1)'),
            ('endpoints', 'check', 'endpoints_rate_limit_check',
             'CHECK (rate_limit OPERATOR(pg_catalog.>) 0)'),
            ('endpoints', 'check', 'endpoints_max_batch_check',
             'CHECK (max_batch OPERATOR(pg_catalog.>=) 1)'),
            ('endpoints', 'check', 'endpoints_format_check',
             'CHECK (format OPERATOR(pg_catalog.=) '
             'ANY (ARRAY[''standard-webhooks'', ''cloudevents'']))'),
            ('endpoints', 'check', 'endpoints_breaker_failures_check',
             'CHECK (breaker_failures OPERATOR(pg_catalog.>=) 0)'),
            ('endpoints', 'check', 'endpoints_breaker_cooldown_seconds_check',
             'CHECK (breaker_cooldown_seconds OPERATOR(pg_catalog.>) 0)'),
            ('endpoints', 'check', 'endpoints_max_pending_check',
             'CHECK (max_pending OPERATOR(pg_catalog.>) 0)'),
            ('endpoints', 'check', 'endpoints_max_pending_per_tenant_check',
             'CHECK (max_pending_per_tenant OPERATOR(pg_catalog.>) 0)'),
            ('endpoints', 'check', 'endpoints_breaker_window_seconds_check',
             'CHECK (breaker_window_seconds OPERATOR(pg_catalog.>) 0)'),
            ('endpoints', 'check', 'endpoints_breaker_rate_check',
             'CHECK (breaker_rate OPERATOR(pg_catalog.>=) 1 '
             'AND breaker_rate OPERATOR(pg_catalog.<=) 100)'),
            ('endpoints', 'check', 'endpoints_client_identity',
             'CHECK ((client_cert IS NULL) OPERATOR(pg_catalog.=) (client_key IS NULL))'),
            ('endpoints', 'check', 'endpoints_tenant_printable',
             'CHECK (tenant OPERATOR(pg_catalog.~) ''^[ -~]{1,200}$'')'),
            ('endpoint_state', 'check', 'endpoint_state_circuit_check',
             'CHECK (circuit OPERATOR(pg_catalog.=) '
             'ANY (ARRAY[''closed'', ''open'', ''half-open'']))'),
            ('schema_version', 'default', 'applied_at', 'pg_catalog.now()'),
            ('endpoints', 'default', 'created_at', 'pg_catalog.now()'),
            ('endpoints', 'default', 'updated_at', 'pg_catalog.now()'),
            ('events', 'default', 'created_at', 'pg_catalog.clock_timestamp()'),
            ('events', 'default', 'deliver_after', 'pg_catalog.clock_timestamp()'),
            ('deliveries', 'default', 'next_attempt_at', 'pg_catalog.clock_timestamp()'),
            ('deliveries', 'default', 'created_at', 'pg_catalog.clock_timestamp()'),
            ('inbox', 'default', 'processed_at', 'pg_catalog.now()'),
            ('attempts', 'default', 'at', 'pg_catalog.now()'),
            ('dispatchers', 'default', 'started_at', 'pg_catalog.now()'),
            ('dispatchers', 'default', 'seen_at', 'pg_catalog.now()')
        ),
        found AS (
            SELECT w.*, coalesce(k.oid, a.oid) AS oid,
                   CASE WHEN k.oid IS NOT NULL THEN 'pg_catalog.pg_constraint'::regclass
                        ELSE 'pg_catalog.pg_attrdef'::regclass END AS catalog
            FROM wanted w
            JOIN pg_catalog.pg_class c
              ON c.relname = w.tab AND c.relnamespace = 'outbox'::regnamespace
            LEFT JOIN pg_catalog.pg_constraint k
              ON w.kind = 'check' AND k.conrelid = c.oid AND k.conname = w.name
            LEFT JOIN pg_catalog.pg_attribute col
              ON w.kind = 'default' AND col.attrelid = c.oid AND col.attname = w.name
            LEFT JOIN pg_catalog.pg_attrdef a
              ON a.adrelid = c.oid AND a.adnum = col.attnum
            WHERE coalesce(k.oid, a.oid) IS NOT NULL
        )
        SELECT f.* FROM found f
        WHERE EXISTS (
            SELECT FROM pg_catalog.pg_depend d
            CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.refclassid, d.refobjid, 0) r
            WHERE d.classid = f.catalog AND d.objid = f.oid
              AND r.schema NOT IN ('pg_catalog', 'outbox'))
    LOOP
        IF bound.kind = 'check' THEN
            EXECUTE pg_catalog.format(
                'ALTER TABLE outbox.%I DROP CONSTRAINT %I, ADD CONSTRAINT %I %s',
                bound.tab, bound.name, bound.name, bound.definition);
        ELSE
            EXECUTE pg_catalog.format('ALTER TABLE outbox.%I ALTER COLUMN %I SET DEFAULT %s',
                                      bound.tab, bound.name, bound.definition);
        END IF;
    END LOOP;
END
$heal$;
