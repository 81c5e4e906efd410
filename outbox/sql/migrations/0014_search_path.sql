-- step: no-transaction
-- Version 14: nothing another role creates runs as the roles that read the
-- outbox. The fleet's rule functions (NAME_v1) are inlined into the calling
-- statement and so parsed on the caller's search_path: their bodies now name
-- every operator and function as pg_catalog's, with explicit casts where
-- number types mix (numeric * double precision, integer / double precision),
-- so that a function or operator planted in public, or in a schema named
-- after a role, can never stand in for one. Their meaning is unchanged (the
-- casts are the ones the built-in resolution chose): the previous release's
-- statements call them as before. The endpoints' two trigger functions get
-- the search_path pg_catalog, pg_temp of their own.
--
-- Tenants: events.tenant and deliveries.tenant hold 1 to 200 printable ASCII
-- characters, as publish() checks (a tenant travels in the ce-tenant
-- header). The CHECKs are added NOT VALID (the table's lock for a moment, no
-- scan: publishers wait milliseconds), then validated by a statement of its
-- own (SHARE UPDATE EXCLUSIVE: publishers, claims and results go on while it
-- scans). A row that breaks the rule stops the validation with its table's
-- name: fix that row (UPDATE ... SET tenant = NULL, say) and run migrate again.
--
-- Locks: CREATE OR REPLACE FUNCTION and ALTER FUNCTION lock no table. Each
-- statement is written to be safe to run again.

-- The circuit breaker: whether an open circuit's cool-down is over, or a
-- half-open one's probe lease ran out: one probe may go.
CREATE OR REPLACE FUNCTION outbox.circuit_probe_due_v1(
    circuit text, opened_at timestamptz, cooldown_seconds double precision,
    probe_until timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (circuit OPERATOR(pg_catalog.=) 'open'
            AND (opened_at OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => cooldown_seconds))
                OPERATOR(pg_catalog.<=) pg_catalog.now())
        OR (circuit OPERATOR(pg_catalog.=) 'half-open'
            AND probe_until OPERATOR(pg_catalog.<) pg_catalog.now())
$$;

-- The circuit breaker: an endpoint's consecutive failures after a batch of
-- results, which reported them as reset (an answer came) and failures after it.
CREATE OR REPLACE FUNCTION outbox.circuit_failures_v1(
    failures integer, reported integer, reset boolean) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN reset THEN reported ELSE failures OPERATOR(pg_catalog.+) reported END
$$;

-- The circuit breaker: whether a batch's results may change an endpoint's
-- state row (only those are locked and written: a healthy endpoint's results
-- never touch it).
CREATE OR REPLACE FUNCTION outbox.circuit_touched_v1(
    circuit text, failures integer, breaker_failures integer, reported integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT circuit OPERATOR(pg_catalog.<>) 'closed'
        OR (breaker_failures OPERATOR(pg_catalog.>) 0
            AND (reported OPERATOR(pg_catalog.>) 0 OR failures OPERATOR(pg_catalog.<>) 0))
$$;

-- The circuit breaker: the state after a batch. A closed circuit opens when its
-- consecutive failures reach breaker_failures; a half-open one closes on the
-- probe's answer and opens again on its failure; an open one waits for its probe.
CREATE OR REPLACE FUNCTION outbox.circuit_after_v1(
    circuit text, failures integer, breaker_failures integer, reported integer,
    reset boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
               WHEN breaker_failures OPERATOR(pg_catalog.=) 0 THEN 'closed'
               WHEN circuit OPERATOR(pg_catalog.=) 'half-open'
                    AND reported OPERATOR(pg_catalog.>) 0 THEN 'open'
               WHEN circuit OPERATOR(pg_catalog.=) 'half-open' AND reset THEN 'closed'
               WHEN circuit OPERATOR(pg_catalog.=) 'closed'
                    AND failures OPERATOR(pg_catalog.>=) breaker_failures THEN 'open'
               ELSE circuit
           END
$$;

-- The rate limit: how many turns (requests, at most wanted) may be taken now,
-- from the shared clock next_turn, turns pace/rate apart (rate_per_second is
-- the limit over the pace), looking horizon_seconds ahead. (The seconds
-- extract gives are numeric: cast to double precision, as the built-in
-- resolution of numeric * double precision did before version 14.)
CREATE OR REPLACE FUNCTION outbox.rate_turns_v1(
    next_turn timestamptz, rate_per_second double precision, horizon_seconds double precision,
    wanted integer) RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT least(wanted, greatest(0, pg_catalog.floor(
               (extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-)
                                   greatest(next_turn, pg_catalog.now())))::double precision
                   OPERATOR(pg_catalog.*) rate_per_second
               OPERATOR(pg_catalog.+) (horizon_seconds OPERATOR(pg_catalog.*) rate_per_second)
               OPERATOR(pg_catalog.+) 1e-9::double precision)::integer
           OPERATOR(pg_catalog.+) 1))
$$;

-- The rate limit: whether the endpoint's next turn is within the horizon (the
-- walk for due work counts it as due).
CREATE OR REPLACE FUNCTION outbox.rate_turn_near_v1(
    next_turn timestamptz, horizon_seconds double precision) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT next_turn OPERATOR(pg_catalog.<=)
           (pg_catalog.now() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => horizon_seconds))
$$;

-- The rate limit: the shared clock after a claim took turns from first_turn.
CREATE OR REPLACE FUNCTION outbox.rate_next_turn_v1(
    first_turn timestamptz, turns integer, rate_per_second double precision)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT first_turn OPERATOR(pg_catalog.+) pg_catalog.make_interval(
               secs => turns::double precision OPERATOR(pg_catalog./) rate_per_second)
$$;

-- Request slots: a slot is free when its lease ran out (a request that ended
-- sets it to '-infinity'; a dispatcher that died stops extending it).
CREATE OR REPLACE FUNCTION outbox.slot_free_v1(expires_at timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT expires_at OPERATOR(pg_catalog.<) pg_catalog.now()
$$;

-- Key order: the deliveries of this key and tenant (NULL: no tenant, a tenant
-- of its own) for this endpoint that come before seq and have not finished.
-- A keyed delivery goes only when there is none. (IS NOT DISTINCT FROM and IN
-- would look = up on the caller's path: written out with pg_catalog's.)
CREATE OR REPLACE FUNCTION outbox.key_blockers_v1(
    endpoint_id bigint, key text, tenant text, seq bigint) RETURNS SETOF bigint
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT p.id FROM outbox.deliveries p
    WHERE p.endpoint_id OPERATOR(pg_catalog.=) key_blockers_v1.endpoint_id
      AND p.key OPERATOR(pg_catalog.=) key_blockers_v1.key
      AND (p.tenant OPERATOR(pg_catalog.=) key_blockers_v1.tenant
           OR (p.tenant IS NULL AND key_blockers_v1.tenant IS NULL))
      AND p.seq OPERATOR(pg_catalog.<) key_blockers_v1.seq
      AND p.state OPERATOR(pg_catalog.=) ANY ('{pending,in_flight}')
$$;

-- The operators' event filter (dead list, events list, dead retry, dead
-- discard, replay): --type as LIKE patterns, --since and --until on the
-- event's created_at, --tenant; NULL leaves a filter out.
CREATE OR REPLACE FUNCTION outbox.event_matches_v1(
    type text, created_at timestamptz, tenant text, types text[], since timestamptz,
    until timestamptz, wanted_tenant text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (types IS NULL OR type OPERATOR(pg_catalog.~~) ANY (types))
       AND (since IS NULL OR created_at OPERATOR(pg_catalog.>=) since)
       AND (until IS NULL OR created_at OPERATOR(pg_catalog.<) until)
       AND (wanted_tenant IS NULL OR tenant OPERATOR(pg_catalog.=) wanted_tenant)
$$;

ALTER FUNCTION outbox.endpoint_fleet_rows() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION outbox.endpoint_backlog_rows() SET search_path = pg_catalog, pg_temp;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conname = 'events_tenant_printable'
                     AND conrelid = 'outbox.events'::regclass) THEN
        ALTER TABLE outbox.events ADD CONSTRAINT events_tenant_printable
            CHECK (tenant ~ '^[ -~]{1,200}$') NOT VALID; END IF;  -- (one statement)
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conname = 'deliveries_tenant_printable'
                     AND conrelid = 'outbox.deliveries'::regclass) THEN
        ALTER TABLE outbox.deliveries ADD CONSTRAINT deliveries_tenant_printable
            CHECK (tenant ~ '^[ -~]{1,200}$') NOT VALID; END IF;  -- (one statement)
END
$$;

ALTER TABLE outbox.events VALIDATE CONSTRAINT events_tenant_printable;

ALTER TABLE outbox.deliveries VALIDATE CONSTRAINT deliveries_tenant_printable;
