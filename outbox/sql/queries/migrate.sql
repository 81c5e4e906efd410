-- name: migrate_lock
-- Held until the migrating transaction ends; the key is arbitrary but fixed.
SELECT pg_advisory_xact_lock(7469813520411);

-- name: schema_exists
SELECT to_regclass('outbox.schema_version') IS NOT NULL;

-- name: schema_version
SELECT coalesce(max(version), 0) FROM outbox.schema_version;

-- name: record_version
INSERT INTO outbox.schema_version (version) VALUES (%(version)s) ON CONFLICT DO NOTHING;
