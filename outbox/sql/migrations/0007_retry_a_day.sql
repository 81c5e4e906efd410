-- Version 7: an endpoint made without --max-attempts or --max-backoff retries
-- a delivery for more than a day before it is dead-lettered: 42 attempts,
-- the waits doubling from 1 s up to an hour (30 hours of nominal waits, 24
-- with the shortest jitter). The earlier defaults, 10 attempts up to 10
-- minutes, dead-lettered a failing receiver's events in about 8.5 minutes:
-- less than a deploy that goes wrong, a night, or a weekend.
--
-- Only the columns' defaults change: endpoints that exist keep the options
-- stored for them (the upgrade notes say how to move them), and the
-- previous release's `endpoints add` and `sync` name every option they store.
--
-- Locks: SET DEFAULT changes only the catalogue (no rewrite, no scan) but
-- takes the endpoints table's ACCESS EXCLUSIVE lock for that moment:
-- publish() waits for it for milliseconds, and the migrator's lock_timeout
-- keeps it from queueing behind a long transaction.

ALTER TABLE outbox.endpoints
    ALTER COLUMN max_attempts SET DEFAULT 42,
    ALTER COLUMN max_backoff_seconds SET DEFAULT 3600;
