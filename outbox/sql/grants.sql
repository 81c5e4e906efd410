-- The grants of the two roles that do not own the outbox schema, printed by
-- `outbox grants` with their names in place of the braces. Run as the
-- operator (the owner) after every `outbox migrate`: each run first takes
-- back whatever the roles held in the schema, so the result is exactly this.
--
-- The application publishes (and reads back its own events, for
-- outbox.testing and idempotency keys), and records what it received
-- (outbox.receive). Of the endpoints it reads only what routing needs:
-- never a secret, a URL or a header, and it changes none.
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM {application};
GRANT USAGE ON SCHEMA outbox TO {application};
GRANT SELECT (id, name, events_like, max_pending, enabled, removed_at)
    ON outbox.endpoints TO {application};
GRANT SELECT, INSERT ON outbox.events TO {application};
GRANT INSERT ON outbox.deliveries TO {application};
GRANT SELECT (endpoint_id) ON outbox.deliveries TO {application};
GRANT SELECT, UPDATE (undelivered) ON outbox.endpoint_backlog TO {application};
GRANT SELECT ON outbox.schema_version TO {application};
GRANT SELECT, INSERT ON outbox.inbox TO {application};

-- The dispatcher claims, delivers and records; it reads the endpoints whole
-- (it signs with their secrets) but changes only what a 410 Gone changes;
-- it purges finished rows (--retention). No DDL, no new endpoints.
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM {dispatcher};
GRANT USAGE ON SCHEMA outbox TO {dispatcher};
GRANT SELECT ON outbox.schema_version, outbox.endpoints TO {dispatcher};
GRANT UPDATE (enabled, disabled_reason, updated_at) ON outbox.endpoints TO {dispatcher};
GRANT SELECT, DELETE ON outbox.events TO {dispatcher};
GRANT SELECT, UPDATE, DELETE ON outbox.deliveries TO {dispatcher};
GRANT SELECT, INSERT, DELETE ON outbox.attempts TO {dispatcher};
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.dispatchers TO {dispatcher};
GRANT SELECT, UPDATE ON outbox.endpoint_state, outbox.endpoint_slots, outbox.endpoint_backlog,
    outbox.maintainer TO {dispatcher};
