-- Version 21: the endpoint manager, a role for the application's endpoint
-- functions (outbox.endpoints), and the roles the grants were given to.
--
-- * outbox.grantees: each role `outbox grants --apply` granted, and of what
--   kind, so that every later --apply brings each one to its version and
--   never takes away what was granted for another kind. Seeded from the
--   privileges an earlier release granted: a role that may insert events is an
--   application, one that may update deliveries a dispatcher, one that may read
--   an endpoint's max_attempts but neither a viewer. Readable by every role
--   (it holds role names only): the guard below reads it as the writer.
-- * endpoint_guard: what the database refuses whoever writes the endpoints.
--   A role other than the schema's owner (or a member of it) may not store
--   an env: secret, which would sign a customer's deliveries with a secret of
--   the dispatcher's environment; an endpoint manager may not change an
--   endpoint without a tenant (the operator's own: an audit feed that gets
--   every tenant's events) nor leave one without a tenant.
-- * The endpoints' triggers that keep their fleet rows (request slots, state,
--   backlog counters) run with their owner's rights: the endpoint manager may
--   add endpoints and change their limits without any right on those tables,
--   which no role but the dispatcher and the owner writes. Nobody but the
--   owner may attach them elsewhere (EXECUTE is the owner's alone).
-- * rotate_endpoint_secret: a secret's rotation moves the secret being replaced
--   into previous_secrets, which needs to read it: for the endpoint manager,
--   which may not, a function with its owner's rights and a fixed path,
--   granted to that role alone (outbox grants --endpoint-manager), which
--   applies the guard's rules to its caller. Not named NAME_vN: those are the
--   fleet's rule functions, PUBLIC's to call, which a dispatcher of any
--   release checks it may call.
--
-- Locks: CREATE TABLE, CREATE FUNCTION and ALTER FUNCTION lock no table of
-- the outbox; CREATE TRIGGER takes the endpoints' SHARE ROW EXCLUSIVE lock for
-- a moment (publishers only read that table; under the migrator's
-- lock_timeout). The previous release's statements never meet the trigger
-- but when they write the endpoints, as the owner or a dispatcher (a 410),
-- where it lets them through.

CREATE TABLE IF NOT EXISTS outbox.grantees (
    role        text NOT NULL,
    kind        text NOT NULL
        CONSTRAINT grantees_kind
        CHECK (kind OPERATOR(pg_catalog.=) ANY (ARRAY['application'::text, 'dispatcher'::text,
               'viewer'::text, 'endpoint-manager'::text])),
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (role, kind)
);
GRANT SELECT ON outbox.grantees TO PUBLIC;

INSERT INTO outbox.grantees (role, kind)
SELECT r.rolname, k.kind
FROM pg_catalog.pg_roles r
CROSS JOIN LATERAL (VALUES
    ('application'::text,
     pg_catalog.has_column_privilege(r.oid, 'outbox.events'::regclass, 'type', 'INSERT')),
    ('dispatcher'::text,
     pg_catalog.has_table_privilege(r.oid, 'outbox.deliveries'::regclass, 'UPDATE')),
    ('viewer'::text,
     pg_catalog.has_column_privilege(r.oid, 'outbox.endpoints'::regclass, 'max_attempts',
                                     'SELECT')
     AND NOT pg_catalog.has_column_privilege(r.oid, 'outbox.events'::regclass, 'type',
                                             'INSERT')
     AND NOT pg_catalog.has_table_privilege(r.oid, 'outbox.deliveries'::regclass, 'UPDATE'))
) AS k(kind, held)
WHERE k.held
  AND r.rolname OPERATOR(pg_catalog.!~) '^pg_'
  AND NOT r.rolsuper
  AND NOT pg_catalog.pg_has_role(r.oid, (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                         WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox'),
                                 'MEMBER')
ON CONFLICT DO NOTHING;

-- Whether the role a statement runs for is the schema's owner (or a member of
-- it): a definer function's own current_user is the owner, so it asks of the
-- role the session set (SET ROLE) or logged in as.
CREATE OR REPLACE FUNCTION outbox.caller_owns() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_catalog.pg_has_role(
        CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
             THEN session_user ELSE pg_catalog.current_setting('role')::name END,
        (SELECT n.nspowner FROM pg_catalog.pg_namespace n
         WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox'),
        'MEMBER')
$$;

-- Whether a role is an endpoint manager that outbox grants recorded (or a
-- member of one). Both are for the functions below, with the owner's rights;
-- the guard, which runs with the writer's, asks the same itself.
CREATE OR REPLACE FUNCTION outbox.is_endpoint_manager(who name) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.grantees g
                   JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) g.role
                   WHERE g.kind OPERATOR(pg_catalog.=) 'endpoint-manager'
                     AND pg_catalog.pg_has_role(who, r.oid, 'MEMBER'))
$$;

CREATE OR REPLACE FUNCTION outbox.endpoint_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_catalog.pg_has_role(current_user,
                              (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                               WHERE n.nspname OPERATOR(pg_catalog.=) 'outbox'),
                              'MEMBER') THEN
        RETURN NEW;
    END IF;
    IF NEW.secret OPERATOR(pg_catalog.~~) 'env:%'
       AND (TG_OP OPERATOR(pg_catalog.=) 'INSERT'
            OR NEW.secret IS DISTINCT FROM OLD.secret) THEN
        RAISE EXCEPTION 'only the outbox schema''s owner may give an endpoint an env: secret'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT 1 FROM outbox.grantees g
               JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) g.role
               WHERE g.kind OPERATOR(pg_catalog.=) 'endpoint-manager'
                 AND pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER')) THEN
        IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND OLD.tenant IS NULL THEN
            RAISE EXCEPTION 'endpoint % belongs to no tenant: an endpoint manager may not '
                            'change it', OLD.name
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.tenant IS NULL THEN
            RAISE EXCEPTION 'an endpoint manager''s endpoint belongs to a tenant'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER endpoint_guard
    BEFORE INSERT OR UPDATE ON outbox.endpoints
    FOR EACH ROW EXECUTE FUNCTION outbox.endpoint_guard();

ALTER FUNCTION outbox.endpoint_fleet_rows() SECURITY DEFINER;
ALTER FUNCTION outbox.endpoint_backlog_rows() SECURITY DEFINER;

-- A rotation (endpoint_rotate_secret, as a function): the endpoint by name
-- (and tenant, when as_tenant is given), its new secret and the old one's
-- overlap in seconds; the endpoint's id,
-- until when any older secret still signs, and until when the one just
-- retired does. For a caller other than the owner, the guard's rules: no
-- env: secret, and for an endpoint manager no endpoint without a tenant (as
-- if not there: no row).
CREATE OR REPLACE FUNCTION outbox.rotate_endpoint_secret(
    endpoint_name text, new_secret text, overlap_seconds double precision, as_tenant text)
RETURNS TABLE (id bigint, old_signs_until timestamptz, retired_until timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    owner boolean := outbox.caller_owns();
    caller name := CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
                        THEN session_user ELSE pg_catalog.current_setting('role')::name END;
BEGIN
    IF NOT owner AND new_secret OPERATOR(pg_catalog.~~) 'env:%' THEN
        RAISE EXCEPTION 'only the outbox schema''s owner may give an endpoint an env: secret'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN QUERY
    UPDATE outbox.endpoints e SET
        previous_secrets =
            CASE WHEN e.secret IS NOT NULL AND e.secret OPERATOR(pg_catalog.<>) new_secret
                      AND overlap_seconds OPERATOR(pg_catalog.>) 0::double precision
                 THEN pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                          'secret', e.secret,
                          'expires_at', pg_catalog.now() OPERATOR(pg_catalog.+)
                                        pg_catalog.make_interval(secs => overlap_seconds)))
                 ELSE '[]'::jsonb
            END
            OPERATOR(pg_catalog.||) coalesce(
                (SELECT pg_catalog.jsonb_agg(p.entry ORDER BY p.ord)
                 FROM pg_catalog.jsonb_array_elements(e.previous_secrets)
                      WITH ORDINALITY AS p(entry, ord)
                 WHERE (p.entry OPERATOR(pg_catalog.->>) 'expires_at')::timestamptz
                       OPERATOR(pg_catalog.>) pg_catalog.now()
                   AND p.entry OPERATOR(pg_catalog.->>) 'secret' IS DISTINCT FROM new_secret),
                '[]'::jsonb),
        secret = new_secret,
        updated_at = pg_catalog.now()
    WHERE e.name OPERATOR(pg_catalog.=) endpoint_name AND e.removed_at IS NULL
      AND (owner OR e.tenant IS NOT NULL OR NOT outbox.is_endpoint_manager(caller))
      AND (as_tenant IS NULL OR e.tenant OPERATOR(pg_catalog.=) as_tenant)
    RETURNING e.id,
              (SELECT pg_catalog.max((p.entry OPERATOR(pg_catalog.->>) 'expires_at')
                                     ::timestamptz)
               FROM pg_catalog.jsonb_array_elements(e.previous_secrets) AS p(entry)),
              CASE WHEN (e.previous_secrets OPERATOR(pg_catalog.->) 0
                         OPERATOR(pg_catalog.->>) 'expires_at')::timestamptz
                        OPERATOR(pg_catalog.=) (pg_catalog.now() OPERATOR(pg_catalog.+)
                                                pg_catalog.make_interval(secs => overlap_seconds))
                   THEN (e.previous_secrets OPERATOR(pg_catalog.->) 0
                         OPERATOR(pg_catalog.->>) 'expires_at')::timestamptz END;
END
$$;
REVOKE EXECUTE ON FUNCTION outbox.rotate_endpoint_secret(text, text, double precision, text) FROM PUBLIC;
