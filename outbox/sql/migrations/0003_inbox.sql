-- step: inbox
-- Version 3: the receiving side's record of processed events (outbox.receive),
-- one row per consumer and event; `outbox purge` removes old ones by
-- processed_at. A new table: nothing publish() uses is locked.
-- Also applied by `outbox migrate --inbox-only`, for a receiver's own database.

CREATE TABLE IF NOT EXISTS outbox.inbox (
    consumer      text NOT NULL,
    event_id      text NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS inbox_processed_at ON outbox.inbox (processed_at);
