-- Version 13: the circuit breaker counts a share in a window. The circuit
-- opens when, of the attempts that ended within the last
-- breaker_window_seconds, at least breaker_failures failed retryably and
-- they are at least breaker_rate percent of those attempts. Endpoints that
-- exist get the defaults (30 s, 50 %). The fleet's count lives on
-- endpoint_state as six buckets, newest first (window_attempts,
-- window_failures, the newest one starting at window_at), so no row is
-- written per attempt; the _v2 functions below are the rule.
--
-- Locks: ADD COLUMN with a constant default only changes the catalogue (no
-- rewrite), but takes the table's ACCESS EXCLUSIVE lock for that moment:
-- publish() waits for the endpoints table's for milliseconds, and the
-- migrator's lock_timeout keeps it from queueing behind a long transaction.
-- The CHECKs scan the endpoints table (a few rows). endpoint_state is the
-- dispatchers' alone. CREATE FUNCTION and GRANT lock no table. The previous
-- release keeps working: its statements name their columns, still call the
-- _v1 functions, and still write failures (kept); its dispatchers count
-- consecutive failures as before until they are replaced.

ALTER TABLE outbox.endpoints
    ADD COLUMN IF NOT EXISTS breaker_window_seconds double precision NOT NULL DEFAULT 30
        CHECK (breaker_window_seconds > 0),
    ADD COLUMN IF NOT EXISTS breaker_rate double precision NOT NULL DEFAULT 50
        CHECK (breaker_rate >= 1 AND breaker_rate <= 100);

ALTER TABLE outbox.endpoint_state
    ADD COLUMN IF NOT EXISTS window_at timestamptz,
    ADD COLUMN IF NOT EXISTS window_attempts integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS window_failures integer[] NOT NULL DEFAULT '{}';

-- The circuit breaker's window: six buckets of a fifth of the window each,
-- newest first; the newest starts at window_at. Counts (attempts or failures)
-- as they stand now: shifted by the buckets begun since window_at, the
-- oldest dropped. So the count covers the attempts that ended within the
-- last window, and at most a fifth of a window more.
CREATE OR REPLACE FUNCTION outbox.circuit_window_v2(
    counts integer[], window_at timestamptz, window_seconds double precision)
RETURNS integer[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN window_at IS NULL THEN '{}'::integer[]
                ELSE (pg_catalog.array_fill(0, ARRAY[least(6, greatest(0,
                          (pg_catalog.floor(extract(epoch FROM pg_catalog.now())::double precision
                                            OPERATOR(pg_catalog./)
                                            (window_seconds OPERATOR(pg_catalog./) 5::double precision))
                           OPERATOR(pg_catalog.-)
                           pg_catalog.floor(extract(epoch FROM window_at)::double precision
                                            OPERATOR(pg_catalog./)
                                            (window_seconds OPERATOR(pg_catalog./) 5::double precision))
                          )::integer))])
                      OPERATOR(pg_catalog.||) counts)[1:6]
           END
$$;

-- The circuit breaker's window: a count of its buckets, all six together.
CREATE OR REPLACE FUNCTION outbox.circuit_sum_v2(counts integer[]) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(counts[1], 0) OPERATOR(pg_catalog.+) coalesce(counts[2], 0)
           OPERATOR(pg_catalog.+) coalesce(counts[3], 0) OPERATOR(pg_catalog.+) coalesce(counts[4], 0)
           OPERATOR(pg_catalog.+) coalesce(counts[5], 0) OPERATOR(pg_catalog.+) coalesce(counts[6], 0)
$$;

-- The circuit breaker's window: counts with others added, bucket by bucket
-- (others newest first too), and added into the newest bucket.
CREATE OR REPLACE FUNCTION outbox.circuit_add_v2(
    counts integer[], others integer[], added integer) RETURNS integer[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[coalesce(counts[1], 0) OPERATOR(pg_catalog.+) coalesce(others[1], 0)
                     OPERATOR(pg_catalog.+) added,
                 coalesce(counts[2], 0) OPERATOR(pg_catalog.+) coalesce(others[2], 0),
                 coalesce(counts[3], 0) OPERATOR(pg_catalog.+) coalesce(others[3], 0),
                 coalesce(counts[4], 0) OPERATOR(pg_catalog.+) coalesce(others[4], 0),
                 coalesce(counts[5], 0) OPERATOR(pg_catalog.+) coalesce(others[5], 0),
                 coalesce(counts[6], 0) OPERATOR(pg_catalog.+) coalesce(others[6], 0)]
$$;

-- The circuit breaker's window: the start of the bucket now falls in.
CREATE OR REPLACE FUNCTION outbox.circuit_window_at_v2(window_seconds double precision)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT pg_catalog.to_timestamp(
               pg_catalog.floor(extract(epoch FROM pg_catalog.now())::double precision
                                OPERATOR(pg_catalog./)
                                (window_seconds OPERATOR(pg_catalog./) 5::double precision))
               OPERATOR(pg_catalog.*) (window_seconds OPERATOR(pg_catalog./) 5::double precision))
$$;

-- The circuit breaker: whether a batch's results may change an endpoint's
-- state row. Only those are locked and written: a healthy endpoint's results
-- never touch it (while the window holds no failure, the dispatchers keep
-- their answers to themselves and bring them with their next failure).
-- window_failures as stored: a failure older than the window makes one more
-- write, which shifts it out.
CREATE OR REPLACE FUNCTION outbox.circuit_touched_v2(
    circuit text, breaker_failures integer, window_failures integer[], reported integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT circuit OPERATOR(pg_catalog.<>) 'closed'
        OR (breaker_failures OPERATOR(pg_catalog.>) 0
            AND (reported OPERATOR(pg_catalog.>) 0
                 OR 0 OPERATOR(pg_catalog.<) ANY (window_failures)))
$$;

-- The circuit breaker: the state after a batch, given the window's attempts
-- and retryable failures with the batch's counted in, and the batch's own
-- answers and failures. A closed circuit opens when the window holds at least
-- breaker_failures failures and they are at least breaker_rate percent of
-- its attempts; a half-open one opens again on the probe's failure and closes
-- on its answer; an open one waits for its probe.
CREATE OR REPLACE FUNCTION outbox.circuit_after_v2(
    circuit text, breaker_failures integer, breaker_rate double precision,
    attempts integer, failures integer, answered integer, reported integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
               WHEN breaker_failures OPERATOR(pg_catalog.=) 0 THEN 'closed'
               WHEN circuit OPERATOR(pg_catalog.=) 'half-open'
                    AND reported OPERATOR(pg_catalog.>) 0 THEN 'open'
               WHEN circuit OPERATOR(pg_catalog.=) 'half-open'
                    AND answered OPERATOR(pg_catalog.>) 0 THEN 'closed'
               WHEN circuit OPERATOR(pg_catalog.=) 'closed'
                    AND failures::double precision OPERATOR(pg_catalog.>=) greatest(
                        breaker_failures::double precision,
                        breaker_rate OPERATOR(pg_catalog.*) attempts::double precision
                            OPERATOR(pg_catalog./) 100::double precision)
                    THEN 'open'
               ELSE circuit
           END
$$;

GRANT EXECUTE ON FUNCTION
    outbox.circuit_window_v2(integer[], timestamptz, double precision),
    outbox.circuit_window_at_v2(double precision),
    outbox.circuit_sum_v2(integer[]),
    outbox.circuit_add_v2(integer[], integer[], integer),
    outbox.circuit_touched_v2(text, integer, integer[], integer),
    outbox.circuit_after_v2(text, integer, double precision, integer, integer, integer, integer)
    TO PUBLIC;
