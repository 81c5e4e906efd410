-- Version 10: the fleet's rules as named functions of the schema (circuit
-- breaker, rate limit, request slots, key order) and the operators' event
-- filter, so that each rule is written once and every statement calls it.
-- Behaviour is unchanged: the statements of this release plan and run as
-- they did with the expressions written in place.
--
-- Locks: CREATE FUNCTION and GRANT lock no table. The previous release's
-- dispatchers and publishers keep working: their statements do not call
-- these functions, and nothing they use changes.

-- The fleet's rules, one function per predicate and per state change, called
-- by the statements of queries/dispatch.sql, which keep only the composition
-- (locking, grouping, RETURNING). Each is inlinable: LANGUAGE sql, one
-- expression (or, for key order, one query the planner folds into the caller's
-- plan), no SET clause, no SECURITY DEFINER, so a statement that calls one is
-- planned exactly as if the expression were written in its place. Versioned:
-- a change of meaning is a new _vN beside the old one, which stays for the
-- previous release's statements during a rolling deploy (and goes in a later
-- step). EXECUTE is PUBLIC's: each computes only from its arguments (key
-- order reads outbox.deliveries with the caller's own rights), so calling one
-- gives no role anything it could not compute itself; the schema's USAGE is
-- still needed to reach them.

-- The circuit breaker: whether an open circuit's cool-down is over, or a
-- half-open one's probe lease ran out: one probe may go.
CREATE OR REPLACE FUNCTION outbox.circuit_probe_due_v1(
    circuit text, opened_at timestamptz, cooldown_seconds double precision,
    probe_until timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (circuit = 'open' AND opened_at + make_interval(secs => cooldown_seconds) <= now())
        OR (circuit = 'half-open' AND probe_until < now())
$$;

-- The circuit breaker: an endpoint's consecutive failures after a batch of
-- results, which reported them as reset (an answer came) and failures after it.
CREATE OR REPLACE FUNCTION outbox.circuit_failures_v1(
    failures integer, reported integer, reset boolean) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN reset THEN reported ELSE failures + reported END
$$;

-- The circuit breaker: whether a batch's results may change an endpoint's
-- state row (only those are locked and written: a healthy endpoint's results
-- never touch it).
CREATE OR REPLACE FUNCTION outbox.circuit_touched_v1(
    circuit text, failures integer, breaker_failures integer, reported integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT circuit <> 'closed' OR (breaker_failures > 0 AND (reported > 0 OR failures <> 0))
$$;

-- The circuit breaker: the state after a batch. A closed circuit opens when its
-- consecutive failures reach breaker_failures; a half-open one closes on the
-- probe's answer and opens again on its failure; an open one waits for its probe.
CREATE OR REPLACE FUNCTION outbox.circuit_after_v1(
    circuit text, failures integer, breaker_failures integer, reported integer,
    reset boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
               WHEN breaker_failures = 0 THEN 'closed'
               WHEN circuit = 'half-open' AND reported > 0 THEN 'open'
               WHEN circuit = 'half-open' AND reset THEN 'closed'
               WHEN circuit = 'closed' AND failures >= breaker_failures THEN 'open'
               ELSE circuit
           END
$$;

-- The rate limit: how many turns (requests, at most wanted) may be taken now,
-- from the shared clock next_turn, turns pace/rate apart (rate_per_second is
-- the limit over the pace), looking horizon_seconds ahead.
CREATE OR REPLACE FUNCTION outbox.rate_turns_v1(
    next_turn timestamptz, rate_per_second double precision, horizon_seconds double precision,
    wanted integer) RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT least(wanted, greatest(0, floor(
               extract(epoch FROM now() - greatest(next_turn, now())) * rate_per_second
               + horizon_seconds * rate_per_second + 1e-9)::int + 1))
$$;

-- The rate limit: whether the endpoint's next turn is within the horizon (the
-- walk for due work counts it as due).
CREATE OR REPLACE FUNCTION outbox.rate_turn_near_v1(
    next_turn timestamptz, horizon_seconds double precision) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT next_turn <= now() + make_interval(secs => horizon_seconds)
$$;

-- The rate limit: the shared clock after a claim took turns from first_turn.
CREATE OR REPLACE FUNCTION outbox.rate_next_turn_v1(
    first_turn timestamptz, turns integer, rate_per_second double precision)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT first_turn + make_interval(secs => turns / rate_per_second)
$$;

-- Request slots: a slot is free when its lease ran out (a request that ended
-- sets it to '-infinity'; a dispatcher that died stops extending it).
CREATE OR REPLACE FUNCTION outbox.slot_free_v1(expires_at timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT expires_at < now()
$$;

-- Key order: the deliveries of this key and tenant (NULL: no tenant, a tenant
-- of its own) for this endpoint that come before seq and have not finished.
-- A keyed delivery goes only when there is none.
CREATE OR REPLACE FUNCTION outbox.key_blockers_v1(
    endpoint_id bigint, key text, tenant text, seq bigint) RETURNS SETOF bigint
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT p.id FROM outbox.deliveries p
    WHERE p.endpoint_id = key_blockers_v1.endpoint_id AND p.key = key_blockers_v1.key
      AND p.tenant IS NOT DISTINCT FROM key_blockers_v1.tenant
      AND p.seq < key_blockers_v1.seq AND p.state IN ('pending', 'in_flight')
$$;

-- The operators' event filter (dead list, events list, dead retry, dead
-- discard, replay): --type as LIKE patterns, --since and --until on the
-- event's created_at, --tenant; NULL leaves a filter out.
CREATE OR REPLACE FUNCTION outbox.event_matches_v1(
    type text, created_at timestamptz, tenant text, types text[], since timestamptz,
    until timestamptz, wanted_tenant text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (types IS NULL OR type LIKE ANY (types))
       AND (since IS NULL OR created_at >= since)
       AND (until IS NULL OR created_at < until)
       AND (wanted_tenant IS NULL OR tenant = wanted_tenant)
$$;

GRANT EXECUTE ON FUNCTION
    outbox.circuit_probe_due_v1(text, timestamptz, double precision, timestamptz),
    outbox.circuit_failures_v1(integer, integer, boolean),
    outbox.circuit_touched_v1(text, integer, integer, integer),
    outbox.circuit_after_v1(text, integer, integer, integer, boolean),
    outbox.rate_turns_v1(timestamptz, double precision, double precision, integer),
    outbox.rate_turn_near_v1(timestamptz, double precision),
    outbox.rate_next_turn_v1(timestamptz, integer, double precision),
    outbox.slot_free_v1(timestamptz),
    outbox.key_blockers_v1(bigint, text, text, bigint),
    outbox.event_matches_v1(text, timestamptz, text, text[], timestamptz, timestamptz, text)
    TO PUBLIC;
