-- step: no-transaction
-- Version 22: the index a page of the delivery log reads
-- (outbox.endpoints.deliveries): an endpoint's finished deliveries (delivered,
-- dead, discarded) by id, newest first. Partial, so that publish() and the
-- claim write nothing more: a delivery enters it once, when it is finished.
--
-- Locks: CREATE INDEX CONCURRENTLY waits for the transactions already open
-- to end without blocking new ones (under the migrator's lock_timeout,
-- retried). A build cut short leaves an invalid index: the next run drops it
-- first and builds it again.

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_index i
               WHERE i.indexrelid OPERATOR(pg_catalog.=)
                     pg_catalog.to_regclass('outbox.deliveries_log')
                 AND NOT i.indisvalid) THEN
        DROP INDEX outbox.deliveries_log; END IF;  -- (one statement: only its last
END                                              -- line ends with a semicolon)
$$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_log
    ON outbox.deliveries (endpoint_id, id)
    WHERE state OPERATOR(pg_catalog.=) ANY (ARRAY['delivered'::text, 'dead'::text,
                                                  'discarded'::text]);
