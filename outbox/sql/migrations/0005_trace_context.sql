-- Version 5: the W3C trace context an event was published in (docs/production.md,
-- "Trace context"): traceparent and tracestate as the producer's span had
-- them, sent with every delivery of the event. NULL when the producer had no
-- current span, or was of an earlier release (which does not fill them).
--
-- Locks: ADD COLUMN of a nullable column without a default only changes the
-- catalogue (no rewrite, no scan), but takes the events table's ACCESS
-- EXCLUSIVE lock for that moment: publish() waits for it for milliseconds,
-- and the migrator's lock_timeout keeps it from queueing behind a long
-- transaction. Nothing else changes: the previous release's statements name
-- their columns and never see these.

ALTER TABLE outbox.events
    ADD COLUMN IF NOT EXISTS traceparent text,
    ADD COLUMN IF NOT EXISTS tracestate text;
