-- The dispatcher claims, delivers and records; it reads the endpoints whole
-- (it signs with their secrets) but changes only what a 410 Gone changes;
-- it purges finished rows (--retention), their attempt history going with
-- them. No DDL, no new endpoints.
GRANT USAGE ON SCHEMA outbox TO {role};
GRANT SELECT ON outbox.schema_version, outbox.endpoints TO {role};
GRANT UPDATE (enabled, disabled_reason, disabled_by, updated_at) ON outbox.endpoints TO {role};
GRANT SELECT, DELETE ON outbox.events TO {role};
GRANT SELECT, UPDATE, DELETE ON outbox.deliveries TO {role};
GRANT SELECT, INSERT, DELETE ON outbox.attempts TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.dispatchers TO {role};
GRANT SELECT, UPDATE ON outbox.endpoint_state, outbox.endpoint_slots, outbox.endpoint_backlog,
    outbox.maintainer TO {role};
