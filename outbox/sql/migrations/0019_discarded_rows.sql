-- step: no-transaction
-- Version 19: the deliveries' state CHECK of version 18 validated, and the
-- index retention finds discarded deliveries by (as deliveries_finished finds
-- delivered ones): partial on state = 'discarded', so that no other row ever
-- enters it and publish() writes nothing more.
--
-- Locks: VALIDATE CONSTRAINT scans the table under SHARE UPDATE EXCLUSIVE,
-- which no publisher, claim or completion waits for. CREATE INDEX
-- CONCURRENTLY waits for the transactions already open to end without
-- blocking new ones (under the migrator's lock_timeout, retried). A build cut
-- short leaves an invalid index: the next run drops it first and builds it
-- again.

ALTER TABLE outbox.deliveries VALIDATE CONSTRAINT deliveries_state_check;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_index i
               WHERE i.indexrelid OPERATOR(pg_catalog.=)
                     pg_catalog.to_regclass('outbox.deliveries_discarded')
                 AND NOT i.indisvalid) THEN
        DROP INDEX outbox.deliveries_discarded; END IF;  -- (one statement: only its last
END                                                    -- line ends with a semicolon)
$$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_discarded
    ON outbox.deliveries (endpoint_id, finished_at)
    WHERE state OPERATOR(pg_catalog.=) 'discarded'::text;
