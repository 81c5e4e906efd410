-- The grants of the roles that do not own the outbox schema, printed by
-- `outbox grants` (or run by its --apply) with their names in place of the
-- braces: for each role, the parts of its kinds (grants_application.sql,
-- grants_dispatcher.sql, grants_viewer.sql, grants_endpoint_manager.sql),
-- after taking back whatever the role held in the schema, so that the result
-- is exactly what its kinds need; and a row in outbox.grantees for each kind,
-- so that the next --apply brings the role to its version with every kind it
-- was granted. Run as the operator (the owner) after every `outbox migrate`.
-- One transaction: applied with psql, with or without ON_ERROR_STOP, a
-- refusal below leaves everything as it was. Names resolve in pg_catalog
-- alone, whatever the session's search_path holds.
BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;

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
{kept_kinds}
-- No function of the schema is anyone's to call but the owner's (the
-- triggers fire without it), but for the fleet's rule functions (named
-- NAME_vN, LANGUAGE sql, the invoker's rights: see schema.sql), which the
-- dispatcher's and the operators' statements call: those are PUBLIC's again.
-- The endpoint manager's functions (with the owner's rights) are granted to
-- that role alone, below.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC, {role_list};
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
{roles}
COMMIT;
