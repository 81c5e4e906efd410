-- name: claim
-- Claim due deliveries for several endpoints at once and lease them.
--
-- * quota: how many rows each endpoint may take now (its free in-flight slots
--   times its batch size, computed by the dispatcher); endpoints disabled or
--   removed since the dispatcher last looked are dropped by the join.
-- * The LATERAL sub-select walks deliveries_pending of one endpoint, oldest
--   due first. A keyed delivery is eligible only when no earlier delivery of
--   its key (lower seq) for that endpoint is still pending or in flight: that
--   is the per-key ordering promise, enforced in the one place every
--   dispatcher goes through. Rows of the same key later in this very batch
--   see the earlier one as pending and are skipped too.
-- * FOR UPDATE SKIP LOCKED lets concurrent dispatchers take disjoint rows
--   without waiting. MATERIALIZED keeps the locking sub-select evaluated once:
--   a sub-select the planner may re-run (the `IN (SELECT ... LIMIT n)` shape)
--   can lock and claim more than n rows (PostgreSQL bug #15715).
-- * Runs in autocommit at READ COMMITTED: under REPEATABLE READ a row updated
--   concurrently would abort the claim with 40001 instead of being skipped.
-- * Each row gets its own lease token; every later write is guarded by it.
WITH quota AS (
    SELECT q.endpoint_id, q.n
    FROM unnest(%(endpoint_ids)s::bigint[], %(limits)s::int[]) AS q(endpoint_id, n)
    JOIN outbox.endpoints e ON e.id = q.endpoint_id AND e.enabled AND e.removed_at IS NULL
),
locked AS MATERIALIZED (
    SELECT c.id
    FROM quota q
    CROSS JOIN LATERAL (
        SELECT d.id
        FROM outbox.deliveries d
        WHERE d.endpoint_id = q.endpoint_id
          AND d.state = 'pending'
          AND d.next_attempt_at <= now()
          AND (d.key IS NULL OR NOT EXISTS (
                SELECT 1 FROM outbox.deliveries p
                WHERE p.endpoint_id = d.endpoint_id
                  AND p.key = d.key
                  AND p.seq < d.seq
                  AND p.state IN ('pending', 'in_flight')))
        ORDER BY d.next_attempt_at
        LIMIT q.n
        FOR UPDATE OF d SKIP LOCKED
    ) c
),
claimed AS (
    UPDATE outbox.deliveries d
    SET state = 'in_flight',
        attempts = d.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    -- An id array, not a join with locked: the planner cannot estimate the
    -- LATERAL's row count and would hash-join the whole table (seen: 900 ms
    -- with 350k rows); = ANY (ARRAY(...)) is a primary-key probe per row.
    WHERE d.id = ANY (ARRAY(SELECT id FROM locked))
    RETURNING d.id, d.endpoint_id, d.event_id, d.attempts, d.lease_token, d.seq
)
SELECT c.id, c.endpoint_id, c.attempts, c.lease_token, c.event_id, e.type, e.key,
       e.payload::text, e.headers::text, e.created_at
FROM claimed c
JOIN outbox.events e ON e.id = c.event_id
ORDER BY c.endpoint_id, c.seq;

-- name: complete
-- Record the outcomes of finished attempts, many in one statement.
-- Guarded by lease token and state: a dispatcher whose lease expired (and
-- whose delivery another dispatcher took over) changes nothing here, so a
-- late result can never overwrite the new owner's. Returns the rows written.
-- The batch travels as one JSON array of arrays: one C-level json.dumps in the
-- dispatcher instead of six Python-level array adaptations.
WITH r AS (
    SELECT (e->>0)::bigint AS id, (e->>1)::uuid AS token, e->>2 AS state,
           (e->>3)::float8 AS delay, e->>4 AS error, (e->>5)::int AS status
    FROM json_array_elements(%(results)s::json) AS e
),
finished AS (
    UPDATE outbox.deliveries d
    SET state = r.state,
        lease_token = NULL,
        lease_expires_at = NULL,
        next_attempt_at = CASE WHEN r.state = 'pending'
                               THEN now() + make_interval(secs => r.delay)
                               ELSE d.next_attempt_at END,
        last_error = r.error,
        last_status = r.status,
        finished_at = CASE WHEN r.state IN ('delivered', 'dead') THEN now() END
    FROM r
    WHERE d.id = r.id AND d.lease_token = r.token AND d.state = 'in_flight'
    RETURNING d.id, d.endpoint_id, d.key, d.seq, d.state
),
-- A keyed delivery that finished hands its turn to the next event of its key:
-- if that one was parked (see park_blocked), it becomes due now.
unparked AS (
    UPDATE outbox.deliveries n
    SET next_attempt_at = now()
    WHERE n.id = ANY (ARRAY(
            SELECT (SELECT p.id FROM outbox.deliveries p
                    WHERE p.endpoint_id = f.endpoint_id AND p.key = f.key AND p.seq > f.seq
                      AND p.state IN ('pending', 'in_flight')
                    ORDER BY p.seq
                    LIMIT 1)
            FROM finished f
            WHERE f.key IS NOT NULL AND f.state IN ('delivered', 'dead')))
      AND n.state = 'pending' AND n.next_attempt_at = 'infinity'
)
SELECT id FROM finished;

-- name: park_blocked
-- Keyed deliveries waiting behind an earlier event of their key cost every
-- claim a look as it walks the due rows in time order: one key with a deep
-- backlog (thousands of events that can only go one at a time) would make
-- each claim walk all of them. When a claim was slow, the dispatcher parks
-- the blocked ones it can see: next_attempt_at = 'infinity' takes them out
-- of the claim's range (they stay pending, counted and ordered). Whoever
-- finishes their key's current delivery unparks the next one (the complete
-- query), and unpark_orphans catches the rest. Ordering never depends on
-- this: the claim still checks every keyed row it takes.
-- The walk is bounded by rows looked at, not rows found, so that a slow
-- claim on a busy database never turns into a scan of a large unkeyed backlog.
WITH walked AS MATERIALIZED (
    SELECT w.id
    FROM unnest(%(endpoint_ids)s::bigint[]) AS q(endpoint_id)
    CROSS JOIN LATERAL (
        SELECT d.id
        FROM outbox.deliveries d
        WHERE d.endpoint_id = q.endpoint_id
          AND d.state = 'pending'
          AND d.next_attempt_at <= now()
        ORDER BY d.next_attempt_at
        LIMIT %(budget)s
    ) w
),
blocked AS MATERIALIZED (
    SELECT d.id
    FROM outbox.deliveries d
    WHERE d.id = ANY (ARRAY(SELECT id FROM walked))
      AND d.state = 'pending'
      AND d.key IS NOT NULL
      AND EXISTS (
            SELECT 1 FROM outbox.deliveries p
            WHERE p.endpoint_id = d.endpoint_id
              AND p.key = d.key
              AND p.seq < d.seq
              AND p.state IN ('pending', 'in_flight'))
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox.deliveries d
SET next_attempt_at = 'infinity'
WHERE d.id = ANY (ARRAY(SELECT id FROM blocked))
RETURNING d.id;

-- name: unpark_orphans
-- A parked delivery whose key has nothing earlier left unfinished (its
-- predecessor finished while the parking statement was running, so the
-- complete query could not see it parked) is made due. Only keys that have
-- parked rows are looked at (the parked rows sit at the 'infinity' end of
-- deliveries_pending), and for each of them only its head.
WITH parked_keys AS (
    SELECT DISTINCT d.endpoint_id, d.key
    FROM outbox.endpoints e
    JOIN outbox.deliveries d
      ON d.endpoint_id = e.id AND d.state = 'pending' AND d.next_attempt_at = 'infinity'
),
heads AS (
    SELECT h.id
    FROM parked_keys k
    CROSS JOIN LATERAL (
        SELECT p.id, p.state, p.next_attempt_at
        FROM outbox.deliveries p
        WHERE p.endpoint_id = k.endpoint_id AND p.key = k.key
          AND p.state IN ('pending', 'in_flight')
        ORDER BY p.seq
        LIMIT 1
    ) h
    WHERE h.state = 'pending' AND h.next_attempt_at = 'infinity'
)
UPDATE outbox.deliveries d
SET next_attempt_at = now()
WHERE d.id = ANY (ARRAY(SELECT id FROM heads))
  AND d.state = 'pending' AND d.next_attempt_at = 'infinity'
RETURNING d.id;

-- name: release
-- Hand claims back without charging the attempt (shutdown before sending).
UPDATE outbox.deliveries d
SET state = 'pending', attempts = greatest(d.attempts - 1, 0),
    lease_token = NULL, lease_expires_at = NULL, next_attempt_at = now()
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
WHERE d.id = r.id AND d.lease_token = r.token AND d.state = 'in_flight';

-- name: extend_leases
-- Keep the leases of deliveries still being worked on. Only lease_expires_at
-- changes and no index covers it, so this is a HOT update.
UPDATE outbox.deliveries d
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
WHERE d.id = r.id AND d.lease_token = r.token AND d.state = 'in_flight';

-- name: rescue_expired
-- Deliveries whose lease ran out (their dispatcher died or froze) go back to
-- pending. The guard is state plus expiry, in one statement, so a delivery
-- that was completed or re-leased meanwhile is never touched. The attempt
-- stays charged: it may have reached the endpoint.
UPDATE outbox.deliveries
SET state = 'pending', lease_token = NULL, lease_expires_at = NULL, next_attempt_at = now()
WHERE state = 'in_flight' AND lease_expires_at < now()
RETURNING id;

-- name: bury_removed
-- A publish that was already under way when its endpoint was removed can still
-- add pending deliveries for it. Nothing would ever claim them (the claim
-- skips removed endpoints): dead-letter them, so that nothing waits forever.
UPDATE outbox.deliveries d
SET state = 'dead', last_error = 'endpoint removed while this delivery was pending',
    finished_at = now(),
    lease_token = NULL, lease_expires_at = NULL
FROM outbox.endpoints e
WHERE e.removed_at IS NOT NULL AND d.endpoint_id = e.id AND d.state = 'pending';

-- name: disable_endpoint
UPDATE outbox.endpoints
SET enabled = false, disabled_reason = %(reason)s, updated_at = now()
WHERE id = %(id)s AND removed_at IS NULL;

-- name: load_endpoints
SELECT id, name, url, secret, previous_secrets::text, max_attempts, timeout_seconds,
       min_backoff_seconds, max_backoff_seconds, max_in_flight, rate_limit, max_batch,
       format, headers::text, enabled
FROM outbox.endpoints
WHERE removed_at IS NULL
ORDER BY id;

-- name: ping
SELECT 1;

-- name: listen
-- Publishers notify outbox_wakeup at commit (see the publish query); endpoint
-- commands notify outbox_endpoints (see endpoints_admin_lock).
LISTEN outbox_wakeup; LISTEN outbox_endpoints;
