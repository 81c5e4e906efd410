-- Version 2: the fleet's shared limits (rate-limit clock, circuit breaker,
-- request slots, backlog bound) and the queue table's autovacuum settings.
--
-- Locks: the new tables and functions lock nothing that publish() uses.
-- ALTER TABLE outbox.endpoints ADD COLUMN takes that small table's ACCESS
-- EXCLUSIVE lock, so it comes last but the triggers that need its columns
-- and the backfill (a few rows per endpoint), and the step commits at once:
-- publish() waits for it for milliseconds. The new columns have constant
-- defaults, so no table is rewritten. ALTER TABLE outbox.deliveries SET
-- (autovacuum ...) takes SHARE UPDATE EXCLUSIVE, which publish() does not
-- conflict with, and rewrites nothing.

CREATE TABLE IF NOT EXISTS outbox.endpoint_state (
    endpoint_id  bigint PRIMARY KEY,
    next_turn    timestamptz NOT NULL DEFAULT '-infinity',
    circuit      text NOT NULL DEFAULT 'closed'
                 CHECK (circuit IN ('closed', 'open', 'half-open')),
    failures     integer NOT NULL DEFAULT 0,
    opened_at    timestamptz,
    probe_until  timestamptz
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS outbox.endpoint_slots (
    endpoint_id  bigint NOT NULL,
    slot         integer NOT NULL,
    lease_token  uuid,
    expires_at   timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (endpoint_id, slot)
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS outbox.endpoint_backlog (
    endpoint_id  bigint NOT NULL,
    shard        smallint NOT NULL,
    undelivered  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint_id, shard)
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS outbox.maintainer (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    holder      uuid,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO outbox.maintainer DEFAULT VALUES ON CONFLICT DO NOTHING;

-- The bodies are version 2's as schema.sql has them: a function's body is
-- never changed in place (README, "Upgrading").
CREATE OR REPLACE FUNCTION outbox.endpoint_fleet_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox.endpoint_state (endpoint_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
    INSERT INTO outbox.endpoint_slots (endpoint_id, slot)
    SELECT NEW.id, s FROM generate_series(0, NEW.max_in_flight - 1) AS s
    ON CONFLICT DO NOTHING;
    DELETE FROM outbox.endpoint_slots WHERE endpoint_id = NEW.id AND slot >= NEW.max_in_flight;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION outbox.endpoint_backlog_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.max_pending IS NOT NULL AND NEW.max_pending IS NOT NULL THEN
        RETURN NULL;  -- a bound changed: the counters stand
    END IF;
    DELETE FROM outbox.endpoint_backlog WHERE endpoint_id = NEW.id;
    IF NEW.max_pending IS NOT NULL THEN
        INSERT INTO outbox.endpoint_backlog (endpoint_id, shard, undelivered)
        SELECT NEW.id, -1, count(*) FROM outbox.deliveries
        WHERE endpoint_id = NEW.id AND (state = 'pending' OR state = 'in_flight');
        INSERT INTO outbox.endpoint_backlog (endpoint_id, shard)
        SELECT NEW.id, s FROM generate_series(0, 15) AS s;
    END IF;
    RETURN NULL;
END
$$;

ALTER TABLE outbox.deliveries SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

ALTER TABLE outbox.endpoints
    ADD COLUMN IF NOT EXISTS breaker_failures integer NOT NULL DEFAULT 10
        CHECK (breaker_failures >= 0),
    ADD COLUMN IF NOT EXISTS breaker_cooldown_seconds double precision NOT NULL DEFAULT 30
        CHECK (breaker_cooldown_seconds > 0),
    ADD COLUMN IF NOT EXISTS max_pending bigint CHECK (max_pending > 0);

CREATE OR REPLACE TRIGGER endpoint_fleet_rows
    AFTER INSERT OR UPDATE OF max_in_flight ON outbox.endpoints
    FOR EACH ROW EXECUTE FUNCTION outbox.endpoint_fleet_rows();
CREATE OR REPLACE TRIGGER endpoint_backlog_rows
    AFTER INSERT OR UPDATE OF max_pending ON outbox.endpoints
    FOR EACH ROW EXECUTE FUNCTION outbox.endpoint_backlog_rows();

-- The rows of the endpoints made before the triggers.
INSERT INTO outbox.endpoint_state (endpoint_id) SELECT id FROM outbox.endpoints
ON CONFLICT DO NOTHING;
INSERT INTO outbox.endpoint_slots (endpoint_id, slot)
SELECT e.id, s FROM outbox.endpoints e, generate_series(0, e.max_in_flight - 1) AS s
ON CONFLICT DO NOTHING;
