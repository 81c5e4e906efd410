-- Version 6: no function of the schema runs with its owner's rights for
-- another role, and none is callable by PUBLIC.
--
-- attempts_follow_deliveries() ran as the schema's owner (SECURITY DEFINER)
-- and PUBLIC could execute it, as PostgreSQL grants EXECUTE to PUBLIC by
-- default: any role could attach it to a table of its own (a temporary one
-- with a transition table named "gone"), have it delete the attempt history,
-- and, with a type and an implicit cast of its own making, run its own code
-- as the owner inside the comparison. Casts are not schema-scoped, so
-- search_path does not stop that. Now it runs as the role whose statement
-- fired it (the roles that delete deliveries, the dispatcher and the owner,
-- hold DELETE on the history since version 4's grants) and refuses any
-- table but outbox.deliveries; and EXECUTE on every function of the schema
-- is the owner's alone, so that no other role can make a trigger of one: a
-- trigger on an outbox table fires whoever runs the statement (PostgreSQL
-- checks EXECUTE when a trigger is made, not when it fires). The two
-- endpoint trigger functions always ran as the invoker; their bodies stay
-- as they were, since an earlier release's `outbox migrate` writes them
-- again as it wrote them. The history's function changes in place: no
-- earlier release writes it again (the release that re-applies its whole
-- schema.sql predates it; later ones apply only their steps).
--
-- The endpoints' send_tracestate (an endpoint may leave the event's
-- tracestate out of its requests; the traceparent is always sent).
--
-- Locks: CREATE OR REPLACE FUNCTION and REVOKE lock no table. ADD COLUMN of
-- a column with a constant default only changes the catalogue (no rewrite,
-- no scan) but takes the endpoints table's ACCESS EXCLUSIVE lock for that
-- moment: publish() waits for it for milliseconds, and the migrator's
-- lock_timeout keeps it from queueing behind a long transaction. The
-- previous release's dispatchers and publishers keep working: their
-- statements name their columns, and the functions do what they did.

CREATE OR REPLACE FUNCTION outbox.attempts_follow_deliveries() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog AS $$
BEGIN
    IF TG_RELID <> 'outbox.deliveries'::regclass OR TG_LEVEL <> 'STATEMENT'
       OR TG_OP <> 'DELETE' THEN
        RAISE EXCEPTION 'outbox.attempts_follow_deliveries() serves outbox.deliveries only';
    END IF;
    DELETE FROM outbox.attempts a USING gone WHERE a.delivery_id = gone.id;
    RETURN NULL;
END
$$;

-- Every function of the schema, named one by one: a step that adds one revokes
-- it too (per-schema default privileges cannot take back PUBLIC's EXECUTE).
REVOKE EXECUTE ON FUNCTION outbox.endpoint_fleet_rows(), outbox.endpoint_backlog_rows(),
    outbox.attempts_follow_deliveries() FROM PUBLIC;

ALTER TABLE outbox.endpoints
    ADD COLUMN IF NOT EXISTS send_tracestate boolean NOT NULL DEFAULT true;
