-- step: no-transaction
-- Version 9: the index of tenants' undelivered deliveries per endpoint, for
-- --max-pending-per-tenant's count (and a tenant's own due rows). Partial on
-- tenant IS NOT NULL: deliveries without a tenant, the previous release's
-- among them, never enter it and cost nothing more to write.
--
-- Locks: CREATE INDEX CONCURRENTLY takes no lock that blocks a publisher or
-- a claim (it waits for the transactions already open to end, without
-- blocking new ones; under the migrator's lock_timeout, retried). A build
-- cut short leaves an invalid index: the next run drops it first (DROP INDEX
-- of an index no query uses: the table's lock for a moment, under the same
-- lock_timeout) and builds it again.

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_index i
               WHERE i.indexrelid = to_regclass('outbox.deliveries_tenant')
                 AND NOT i.indisvalid) THEN
        DROP INDEX outbox.deliveries_tenant; END IF;  -- (one statement: only its last
END                                                -- line ends with a semicolon)
$$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_tenant
    ON outbox.deliveries (endpoint_id, tenant, next_attempt_at)
    WHERE tenant IS NOT NULL AND state IN ('pending', 'in_flight');
