-- name: testing_published_events
-- The events the caller's own transaction inserted and has not committed,
-- savepoints included (a test framework's transaction around the test makes
-- the application's own transaction blocks savepoints), and nothing else.
-- age(xmin) is the row's inserting xid counted back from this transaction's
-- own: 0 for a row of ours, negative for one of our subtransactions (their
-- xids come later), positive for anything older, so older rows are passed over
-- without a status lookup. The remaining rows are ours or were committed by
-- transactions that started after ours; pg_xact_status of the row's full
-- (64-bit) xid, rebuilt from our own, says "in progress" only for ours: an
-- uncommitted row of anyone else is not visible here at all.
WITH mine AS (SELECT pg_current_xact_id_if_assigned()::text::bigint AS top)
SELECT e.id, e.type, e.key, e.payload, e.headers, e.idempotency_key, e.created_at, e.tenant
FROM outbox.events e, mine
WHERE mine.top IS NOT NULL
  AND age(e.xmin) <= 0
  AND pg_xact_status((mine.top - age(e.xmin))::text::xid8) = 'in progress'
  AND (%(type)s::text IS NULL OR e.type = %(type)s::text)
ORDER BY e.seq;
