-- step: no-transaction
-- Version 11: the index of fair turns between the tenants of an endpoint.
-- deliveries_turns holds every pending delivery by (endpoint, tenant, due
-- time), deliveries without a tenant (one tenant of their own) among them, at
-- the end of their endpoint's entries: the claim finds the tenants with due
-- work by a bounded walk over it (one descent per tenant, whose first entry
-- is its earliest pending row) and takes each tenant's rows in its turn. It
-- replaces version 9's deliveries_tenant (pending and in-flight rows of
-- tenants only): --max-pending-per-tenant now counts a tenant's pending rows
-- here and its rows in flight through deliveries_in_flight, so a tenant's
-- delivery is in as many indexes as before, and one without a tenant in one
-- more.
--
-- Locks: CREATE INDEX CONCURRENTLY and DROP INDEX CONCURRENTLY take no lock
-- that blocks a publisher or a claim (each waits for the transactions already
-- open to end, without blocking new ones; under the migrator's lock_timeout,
-- retried). A build cut short leaves an invalid index: the next run drops it
-- first (an index no query uses; the table's lock for a moment, under the
-- same lock_timeout) and builds it again. The previous release's statements
-- never name an index: they run as before, planned over the indexes there are.

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_index i
               WHERE i.indexrelid = to_regclass('outbox.deliveries_turns')
                 AND NOT i.indisvalid) THEN
        DROP INDEX outbox.deliveries_turns; END IF;  -- (one statement: only its last
END                                               -- line ends with a semicolon)
$$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_turns
    ON outbox.deliveries (endpoint_id, tenant, next_attempt_at)
    WHERE state = 'pending';

DROP INDEX CONCURRENTLY IF EXISTS outbox.deliveries_tenant;
