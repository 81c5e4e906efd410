-- The grants of the two roles that do not own the outbox schema (three with
-- `--viewer`: grants_viewer.sql goes before the COMMIT), printed by
-- `outbox grants` with their names in place of the braces. Run as the
-- operator (the owner) after every `outbox migrate`: each run first takes
-- back whatever the roles held in the schema, so the result is exactly this.
-- One transaction: applied with psql, with or without ON_ERROR_STOP, a
-- refusal below leaves everything as it was.
BEGIN;

-- Naming the schema's owner would take its own rights away (REVOKE ALL
-- applies to an owner too): refuse, and change nothing.
DO $guard$
DECLARE
    owner oid := (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'outbox');
BEGIN
    IF owner IS NULL THEN
        RAISE EXCEPTION 'there is no outbox schema here: run `outbox migrate` first';
    END IF;
    IF owner IN (SELECT oid FROM pg_catalog.pg_roles
                 WHERE rolname IN ({role_names})) THEN
        RAISE EXCEPTION 'role % owns the outbox schema: it needs no grants, and these would '
                        'take its own away; name the application''s and the dispatcher''s '
                        'own roles (docs/upgrading.md, "Roles")',
                        pg_catalog.quote_ident(owner::regrole::text);
    END IF;
END
$guard$;

-- No function of the schema is anyone's to call but the owner's (the
-- triggers fire without it), but for the fleet's rule functions (named
-- NAME_vN, LANGUAGE sql, the invoker's rights: see schema.sql), which the
-- dispatcher's and the operators' statements call: those are PUBLIC's again.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC, {application}, {dispatcher};
DO $rules$
DECLARE
    rule regprocedure;
BEGIN
    FOR rule IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'outbox'::regnamespace
                  AND p.proname ~ '_v[0-9]+$' AND NOT p.prosecdef
                  AND p.prolang = (SELECT l.oid FROM pg_catalog.pg_language l
                                   WHERE l.lanname = 'sql')
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', rule);
    END LOOP;
END
$rules$;

-- The application publishes (and reads back its own events, for
-- outbox.testing and idempotency keys), and records what it received
-- (outbox.receive). It writes only the columns publish() and receive write
-- (a delivery's state, attempts and error are the dispatcher's), and of the
-- endpoints it reads only what routing needs: never a secret, a URL or a
-- header, and it changes none.
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM {application};
GRANT USAGE ON SCHEMA outbox TO {application};
GRANT SELECT (id, name, events_like, max_pending, max_pending_per_tenant, enabled,
               removed_at, tenant, when_full)
    ON outbox.endpoints TO {application};
GRANT SELECT ON outbox.events TO {application};
GRANT INSERT (id, type, key, payload, headers, idempotency_key, created_at, deliver_after,
              unrouted, traceparent, tracestate, tenant) ON outbox.events TO {application};
GRANT INSERT (event_id, endpoint_id, seq, key, tenant, next_attempt_at)
    ON outbox.deliveries TO {application};
-- endpoint_id for what publish returns; tenant and state for
-- --max-pending-per-tenant's count.
GRANT SELECT (endpoint_id, tenant, state) ON outbox.deliveries TO {application};
GRANT SELECT, UPDATE (undelivered) ON outbox.endpoint_backlog TO {application};
GRANT SELECT ON outbox.schema_version TO {application};
GRANT SELECT ON outbox.inbox TO {application};
GRANT INSERT (consumer, event_id) ON outbox.inbox TO {application};

-- The dispatcher claims, delivers and records; it reads the endpoints whole
-- (it signs with their secrets) but changes only what a 410 Gone changes;
-- it purges finished rows (--retention), their attempt history going with
-- them. No DDL, no new endpoints.
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM {dispatcher};
GRANT USAGE ON SCHEMA outbox TO {dispatcher};
GRANT SELECT ON outbox.schema_version, outbox.endpoints TO {dispatcher};
GRANT UPDATE (enabled, disabled_reason, disabled_by, updated_at) ON outbox.endpoints
    TO {dispatcher};
GRANT SELECT, DELETE ON outbox.events TO {dispatcher};
GRANT SELECT, UPDATE, DELETE ON outbox.deliveries TO {dispatcher};
GRANT SELECT, INSERT, DELETE ON outbox.attempts TO {dispatcher};
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.dispatchers TO {dispatcher};
GRANT SELECT, UPDATE ON outbox.endpoint_state, outbox.endpoint_slots, outbox.endpoint_backlog,
    outbox.maintainer TO {dispatcher};
{viewer_grants}
COMMIT;
