-- Version 23: the endpoint manager changes deliveries through functions.
--
-- The role of the application's endpoint functions (outbox grants
-- --endpoint-manager) may not move a delivery to delivered or dead by SQL, so
-- it has no UPDATE on outbox.deliveries; what those functions change there
-- runs in these, with their owner's rights and a fixed path, granted to that
-- role alone. The owner's commands call them too, so that each is one
-- statement for both: the statement they ran before, as it was, with its
-- parameters named. For a caller other than the owner (outbox.caller_owns)
-- each acts only at an endpoint that belongs to a tenant, as if the others
-- were not there:
-- * retry_endpoint_now: retry-now (pending deliveries due now, an open
--   circuit half-open), at one endpoint;
-- * bury_endpoint_deliveries: a forced removal's dead letters;
-- * discard_endpoint_pending: stop sending (disable --drop, and enable after
--   it);
-- * retry_dead_deliveries: dead retry; one endpoint's for such a caller.
-- Dispatchers are woken at commit when something became due. Not named
-- NAME_vN: those are PUBLIC's rule functions, which every dispatcher checks it
-- may call.
--
-- Locks: CREATE FUNCTION locks no table.

CREATE OR REPLACE FUNCTION outbox.retry_endpoint_now(endpoint bigint, only_tenant text)
RETURNS TABLE (due bigint, half_open boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    made bigint;
    opened boolean;
BEGIN
    WITH target AS MATERIALIZED (
        SELECT e.id FROM outbox.endpoints e
        WHERE e.id OPERATOR(pg_catalog.=) retry_endpoint_now.endpoint AND NOT e.dropping
          AND (outbox.caller_owns() OR e.tenant IS NOT NULL)
    ),
    due AS MATERIALIZED (
        SELECT d.id FROM outbox.deliveries d
        WHERE d.endpoint_id OPERATOR(pg_catalog.=) (SELECT t.id FROM target t)
          AND d.state = 'pending'
          AND d.next_attempt_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
          AND d.next_attempt_at OPERATOR(pg_catalog.<>) 'infinity'::timestamptz
          AND (retry_endpoint_now.only_tenant IS NULL
               OR d.tenant OPERATOR(pg_catalog.=) retry_endpoint_now.only_tenant)
        ORDER BY d.id
        FOR NO KEY UPDATE
    ),
    made_due AS (
        UPDATE outbox.deliveries d
        SET next_attempt_at = pg_catalog.clock_timestamp()
        FROM due x
        WHERE d.id OPERATOR(pg_catalog.=) x.id AND d.state = 'pending'
          AND d.next_attempt_at OPERATOR(pg_catalog.<>) 'infinity'::timestamptz
        RETURNING d.id
    ),
    half_open AS (
        UPDATE outbox.endpoint_state s
        SET circuit = 'half-open', probe_until = '-infinity'
        WHERE s.endpoint_id OPERATOR(pg_catalog.=) (SELECT t.id FROM target t)
          AND s.circuit = 'open'
        RETURNING s.endpoint_id
    )
    SELECT (SELECT count(*) FROM made_due), EXISTS (SELECT 1 FROM half_open)
    INTO made, opened;
    IF made > 0 OR opened THEN
        PERFORM pg_catalog.pg_notify('outbox_wakeup', '');
    END IF;
    RETURN QUERY SELECT made, opened;
END
$$;

CREATE OR REPLACE FUNCTION outbox.bury_endpoint_deliveries(endpoint bigint, reason text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    n bigint;
BEGIN
    WITH doomed AS MATERIALIZED (
        SELECT id FROM outbox.deliveries
        WHERE endpoint_id = bury_endpoint_deliveries.endpoint
          AND (outbox.caller_owns()
               OR EXISTS (SELECT 1 FROM outbox.endpoints e
                          WHERE e.id = bury_endpoint_deliveries.endpoint
                            AND e.tenant IS NOT NULL))
          AND (state = 'pending' OR state = 'in_flight')
        ORDER BY id
        FOR NO KEY UPDATE
    )
    UPDATE outbox.deliveries d
    SET state = 'dead', last_error = bury_endpoint_deliveries.reason,
        finished_at = clock_timestamp(),
        lease_token = NULL, lease_expires_at = NULL
    FROM doomed x
    WHERE d.id = x.id AND (d.state = 'pending' OR d.state = 'in_flight');
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION outbox.discard_endpoint_pending(endpoint_name text, as_tenant text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    n bigint;
BEGIN
    WITH target AS MATERIALIZED (
        SELECT id FROM outbox.endpoints
        WHERE name = discard_endpoint_pending.endpoint_name AND removed_at IS NULL AND dropping
          AND (outbox.caller_owns() OR tenant IS NOT NULL)
          AND (discard_endpoint_pending.as_tenant IS NULL
               OR tenant OPERATOR(pg_catalog.=) discard_endpoint_pending.as_tenant)
    ),
    doomed AS MATERIALIZED (
        SELECT d.id FROM outbox.deliveries d
        WHERE d.endpoint_id = (SELECT t.id FROM target t) AND d.state = 'pending'
        ORDER BY d.id
        FOR NO KEY UPDATE OF d
    ),
    discarded AS (
        UPDATE outbox.deliveries d
        SET state = 'discarded', finished_at = clock_timestamp(),
            last_error = 'discarded: the endpoint was disabled with drop (stop sending)',
            lease_token = NULL, lease_expires_at = NULL
        FROM doomed x
        WHERE d.id = x.id AND d.state = 'pending'
        RETURNING d.id
    ),
    uncounted AS (
        UPDATE outbox.endpoint_backlog s
        SET undelivered = s.undelivered - (SELECT count(*) FROM discarded)
        FROM target t
        CROSS JOIN LATERAL (
            SELECT coalesce((SELECT b.shard FROM outbox.endpoint_backlog b
                             WHERE b.endpoint_id = t.id AND b.shard >= 0
                             ORDER BY b.shard = pg_backend_pid() % 16 DESC, b.shard
                             LIMIT 1
                             FOR UPDATE SKIP LOCKED),
                            pg_backend_pid() % 16) AS shard) pick
        WHERE s.endpoint_id = t.id AND s.shard = pick.shard
          AND EXISTS (SELECT FROM discarded)
    )
    SELECT count(*) INTO n FROM discarded;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION outbox.retry_dead_deliveries(
    endpoint bigint, event_ids uuid[], types text[], since timestamptz, until timestamptz,
    only_tenant text, dry_run boolean)
RETURNS TABLE (retried bigint, eligible bigint, disabled text[], skipped text,
               dropping text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    WITH live AS (
        SELECT id, name, enabled, dropping FROM outbox.endpoints
        WHERE removed_at IS NULL
          AND (retry_dead_deliveries.endpoint IS NULL OR id = retry_dead_deliveries.endpoint)
          AND (outbox.caller_owns()
               OR (retry_dead_deliveries.endpoint IS NOT NULL AND tenant IS NOT NULL))
        FOR SHARE
    ),
    chosen AS MATERIALIZED (
        SELECT d.id, d.endpoint_id
        FROM outbox.deliveries d
        JOIN outbox.events ev ON ev.id = d.event_id
        WHERE d.state = 'dead'
          AND (outbox.caller_owns() OR d.endpoint_id IN (SELECT live.id FROM live))
          AND (retry_dead_deliveries.endpoint IS NULL
               OR d.endpoint_id = retry_dead_deliveries.endpoint)
          AND (retry_dead_deliveries.event_ids IS NULL
               OR d.event_id = ANY (retry_dead_deliveries.event_ids))
          AND outbox.event_matches_v1(ev.type, ev.created_at, ev.tenant,
                                      retry_dead_deliveries.types,
                                      retry_dead_deliveries.since, retry_dead_deliveries.until,
                                      retry_dead_deliveries.only_tenant)
          AND NOT EXISTS (SELECT 1 FROM outbox.endpoints e
                          WHERE e.id = d.endpoint_id AND e.tenant IS NOT NULL
                            AND (ev.tenant IS NULL
                                 OR e.tenant OPERATOR(pg_catalog.<>) ev.tenant))
        ORDER BY d.id  -- row locks in id order, as every writer of deliveries takes them
        FOR NO KEY UPDATE OF d
    ),
    eligible AS (
        SELECT c.id, c.endpoint_id FROM chosen c JOIN live ON live.id = c.endpoint_id
        WHERE NOT live.dropping
    ),
    retried AS (
        UPDATE outbox.deliveries d
        SET state = 'pending', attempts_before = d.attempts_before + d.attempts, attempts = 0,
            next_attempt_at = clock_timestamp(),
            lease_token = NULL, lease_expires_at = NULL, finished_at = NULL
        FROM eligible el
        WHERE d.id = el.id AND d.state = 'dead' AND NOT retry_dead_deliveries.dry_run
        RETURNING d.endpoint_id
    ),
    -- Retried deliveries count against a --max-pending bound again (shard -1).
    counted AS (
        UPDATE outbox.endpoint_backlog b
        SET undelivered = b.undelivered + r.n
        FROM (SELECT endpoint_id, count(*) AS n FROM retried GROUP BY endpoint_id) r
        WHERE b.endpoint_id = r.endpoint_id AND b.shard = -1
    )
    SELECT (SELECT count(*) FROM retried), (SELECT count(*) FROM eligible),
           ARRAY(SELECT DISTINCT live.name FROM live
                 WHERE NOT live.enabled
                   AND EXISTS (SELECT 1 FROM eligible el WHERE el.endpoint_id = live.id)
                 ORDER BY live.name),
           (SELECT coalesce(json_agg(json_build_array(s.name, s.n) ORDER BY s.name), '[]')::text
            FROM (SELECT coalesce(e.name, '#' || c.endpoint_id::text) AS name, count(*) AS n
                  FROM chosen c
                  LEFT JOIN outbox.endpoints e ON e.id = c.endpoint_id
                  WHERE NOT EXISTS (SELECT 1 FROM live WHERE live.id = c.endpoint_id)
                  GROUP BY 1) s),
           ARRAY(SELECT DISTINCT live.name FROM live
                 WHERE live.dropping
                   AND EXISTS (SELECT 1 FROM chosen c WHERE c.endpoint_id = live.id)
                 ORDER BY live.name)
    INTO retried, eligible, disabled, skipped, dropping;
    IF retried > 0 THEN
        PERFORM pg_catalog.pg_notify('outbox_wakeup', '');
    END IF;
    RETURN NEXT;
END
$$;

REVOKE EXECUTE ON FUNCTION outbox.retry_endpoint_now(bigint, text),
    outbox.bury_endpoint_deliveries(bigint, text),
    outbox.discard_endpoint_pending(text, text),
    outbox.retry_dead_deliveries(bigint, uuid[], text[], timestamptz, timestamptz, text, boolean)
    FROM PUBLIC;
