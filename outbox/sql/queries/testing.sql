-- name: testing_published_events
SELECT id, type, key, payload, headers, idempotency_key, created_at
FROM outbox.events
WHERE %(type)s::text IS NULL OR type = %(type)s::text
ORDER BY seq;
