-- Queries of the receiving side (outbox/receive/_record.py) and of its purge.

-- name: inbox_record
-- The whole of first_time(). ON CONFLICT DO NOTHING decides against the
-- primary key's unique index, so it sees rows of every transaction, committed
-- or not: a row inserted earlier in this transaction conflicts (no row back:
-- False); a row of another open transaction makes this one wait for it, then
-- conflict if it committed (False) or insert if it rolled back (True). Under
-- REPEATABLE READ a row committed after our snapshot raises a serialization
-- failure instead, as PostgreSQL does for every ON CONFLICT at that level.
INSERT INTO outbox.inbox (consumer, event_id)
VALUES (%(consumer)s, %(event_id)s)
ON CONFLICT DO NOTHING
RETURNING true;

-- name: inbox_purge_batch
-- Records older than the cutoff, a batch at a time through the processed_at
-- index; the CTE fixes the LIMIT (PostgreSQL bug #15715) and SKIP LOCKED lets
-- two purges run side by side. A record purged is forgotten: a delivery of
-- that event retried or replayed later is processed again.
WITH doomed AS (
    SELECT consumer, event_id FROM outbox.inbox
    WHERE processed_at < %(cutoff)s
    ORDER BY processed_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM outbox.inbox i USING doomed
    WHERE i.consumer = doomed.consumer AND i.event_id = doomed.event_id
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: inbox_would_purge
-- What `outbox purge --dry-run` reports of the inbox: records older than the cutoff.
SELECT count(*) FROM outbox.inbox WHERE processed_at < %(cutoff)s;

-- name: purge_tables
-- Which halves of the schema this database holds: a receiver's own database
-- (outbox migrate --inbox-only) has the inbox and no events.
SELECT to_regclass('outbox.events') IS NOT NULL, to_regclass('outbox.inbox') IS NOT NULL,
       now() - %(older_than)s::interval;
