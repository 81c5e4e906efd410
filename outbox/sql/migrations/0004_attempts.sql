-- Version 4: the attempt history (`outbox show`) and the dispatchers'
-- heartbeats (`outbox status`). One row per failed attempt
-- of a delivery, written by the dispatcher in the statement that records the
-- attempt's result; a successful attempt adds no row (its time, status and
-- duration are the delivery's finished_at, last_status and
-- last_duration_seconds). The history is deleted with its delivery, by the
-- database itself, so that every way a delivery goes (retention, purge, an
-- earlier release's retention during a rolling deploy, SQL by hand) takes its
-- history along; the trigger's function runs as the schema's owner, so that
-- a role whose grants predate the history can still delete deliveries.
--
-- Locks: the new table and function lock nothing publish() uses. ALTER TABLE
-- outbox.deliveries ADD COLUMN takes its ACCESS EXCLUSIVE lock for
-- milliseconds (a nullable column and one with a constant default rewrite
-- nothing), under the step's lock_timeout; CREATE TRIGGER takes SHARE ROW
-- EXCLUSIVE, as briefly. Both are in this one transaction, which commits at
-- once.

CREATE TABLE IF NOT EXISTS outbox.attempts (
    delivery_id       bigint NOT NULL,
    attempt           integer NOT NULL,
    at                timestamptz NOT NULL DEFAULT now(),
    status            integer,
    reason            text NOT NULL
                      CHECK (reason IN ('timeout', 'connect', 'http_4xx', 'http_5xx', 'other')),
    duration_seconds  double precision,
    error             text
);
CREATE INDEX IF NOT EXISTS attempts_delivery ON outbox.attempts (delivery_id, attempt);

ALTER TABLE outbox.deliveries
    ADD COLUMN IF NOT EXISTS attempts_before integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_duration_seconds double precision;

CREATE OR REPLACE FUNCTION outbox.attempts_follow_deliveries() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    DELETE FROM outbox.attempts a USING gone WHERE a.delivery_id = gone.id;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER attempts_follow_deliveries
    AFTER DELETE ON outbox.deliveries
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.attempts_follow_deliveries();

-- Each running dispatcher's heartbeat (`outbox status`: how many are alive),
-- with what it cannot do (an endpoint whose env: secret it cannot read). One
-- row per process, upserted by its maintenance every few seconds (a fleet of
-- 50 idle sidecars: ten small updates a second, HOT since no index covers
-- seen_at), deleted when it stops; rows of processes that died are swept by
-- the maintainer after an hour. An earlier release writes none: status then
-- still counts the maintainer lease as one live dispatcher.
CREATE TABLE IF NOT EXISTS outbox.dispatchers (
    id          uuid PRIMARY KEY,
    host        text NOT NULL,
    pid         integer NOT NULL,
    version     text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    problems    jsonb NOT NULL DEFAULT '{}'
) WITH (fillfactor = 50);
