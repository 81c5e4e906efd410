-- name: catalog_settings
-- The catalog read's transaction: the path the query was written for,
-- a statement timeout, and row security off, so that a policy of the
-- catalog's owner never runs with the reader's rights (the server then
-- refuses a query that a policy would filter, at prepare time already).
-- Also given in the startup packet; set again here for a transaction
-- pooler that drops it.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, public, pg_temp', true),
       pg_catalog.set_config('statement_timeout', '30s', true),
       pg_catalog.set_config('row_security', 'off', true);

-- name: catalog_relations
-- The relations the catalog query reads that run code of their owner, or
-- could: views and foreign tables, tables with row security or policies.
-- Preparing the query (parse and rewrite, in this transaction) took an
-- ACCESS SHARE lock on every relation it names and on those the views it
-- names read, held until the transaction ends: no policy can be added nor a
-- view replaced before the query runs. The partitions and children of those
-- (which only planning would lock) are read from pg_inherits: one may be a
-- foreign table. The system's own (below the first normal OID: the
-- catalogs, information_schema) are left out, as is anything this
-- statement itself locks. Every operator has its exact built-in match (the
-- typed OID too): this runs on the catalog's path, which holds public.
WITH RECURSIVE read (oid) AS (
    SELECT l.relation
    FROM pg_catalog.pg_locks l
    WHERE l.pid = pg_catalog.pg_backend_pid()
      AND l.locktype = 'relation'
      AND l.relation >= '16384'::pg_catalog.oid
    UNION
    SELECT i.inhrelid
    FROM pg_catalog.pg_inherits i
    JOIN read r ON i.inhparent = r.oid
)
SELECT n.nspname::text, c.relname::text, c.relkind::text
FROM read r
JOIN pg_catalog.pg_class c ON c.oid = r.oid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('v', 'f')
   OR c.relrowsecurity
   OR EXISTS (SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid)
ORDER BY n.nspname, c.relname;
