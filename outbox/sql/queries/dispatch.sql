-- name: claim
-- Claim due deliveries for several endpoints at once, within the limits the
-- whole fleet shares, and lease them. One statement, one round trip.
--
-- Inputs, per endpoint (parallel arrays): requests, the request slots this
-- dispatcher could start now; held, its requests running beyond those
-- waiting for a slot (each may take one waiting group when it ends); prefetch,
-- how many groups it may keep waiting in memory; rows, a cap on rows. Then
-- the lease length; horizon: how far ahead a rate-limited endpoint's turns
-- may be taken (those requests wait their turn before sending); and budget:
-- the payload bytes the claim may bring into the dispatcher's memory.
--
-- * wanted drops endpoints disabled or removed since the dispatcher looked,
--   and reads each endpoint's shared state as of this statement's snapshot.
-- * gated locks the state row (FOR NO KEY UPDATE SKIP LOCKED: another
--   claimer holding it is working on it right now, so skip it) of endpoints
--   whose row this claim must change: a rate limit's turns, or the one probe
--   of a circuit whose cool-down is over. Locked, the row is its latest
--   version, so two dispatchers never take the same turn or send two probes.
-- * allowance: how many requests each endpoint may start. A closed circuit
--   allows what was asked (rate-limited: the turns due within the horizon);
--   a circuit due a probe allows one, marked as the probe; an open circuit
--   in its cool-down, or one whose probe is out, allows none.
-- * slots takes that many free slots (expired leases count as free) with
--   FOR UPDATE SKIP LOCKED, so --max-in-flight holds for the fleet.
-- * locked takes the deliveries: per tenant's rounds (below), oldest due first, enough
--   for the slots granted plus the groups it may prefetch (which wait for a
--   running request's slot in the dispatcher, holding none of their own). A
--   keyed delivery is eligible only when no earlier delivery of its key (lower
--   seq) for that endpoint is still pending or in flight: the per-key order,
--   enforced in the one place every dispatcher goes through. Rows of one key
--   later in this very batch see the earlier one as pending and are skipped.
--   MATERIALIZED keeps the locking sub-selects evaluated once: a sub-select
--   the planner may re-run (the `IN (SELECT ... LIMIT n)` shape) can lock and
--   claim more than n rows (PostgreSQL bug #15715).
--   The scan starts at the endpoint's floor (floors; '-infinity': from the
--   index's head), a lower bound the dispatcher keeps of the next_attempt_at
--   of every pending row it has not seen claimed. While a snapshot elsewhere
--   holds the MVCC horizon back, every row claimed since leaves an index entry
--   here whose version no vacuum may remove, and a scan from the head walks
--   all of them: from the floor it walks those of the last claims only. The
--   floor cuts the scan, never the order: the key check above looks at every
--   earlier delivery of the key wherever it lies.
-- * next_pending: per endpoint that took rows, the earliest pending row from
--   its floor on that this claim did not take, as of the statement's snapshot
--   (the rows it locked are still pending there: left out by id; rows another
--   claimer holds count as not taken, which keeps the floor behind them). The
--   dispatcher's next floor is at most that, and at most the time before which
--   no transaction still running can have written a row (xmin, xmax: this
--   snapshot's, for the dispatcher to tell which claim's time that is).
-- * Rounds between tenants (dealt, locked): per endpoint, the tenants with due
--   work share the requests the claim fills, in rounds: outbox.tenant_turns_v1
--   (schema.sql says how) walks the ring of tenants from the one after
--   ring_after (ring_null: after the deliveries without a tenant; neither:
--   from the start), at most ring_steps of them, and deals the requests;
--   locked takes each tenant's rows for its requests as described above.
--   An endpoint whose pending rows all have one tenant (sole: its earliest
--   row's, and no other's by a descent or three) deals it every request
--   without the walk, which would count the endpoint's rows in flight and
--   step the ring to find what sole knows: the same groups, the same order.
--   Two arms in locked (named, and without a tenant), because `tenant IS NOT
--   DISTINCT FROM` cannot use the index, while `= tenant` and `IS NULL` each
--   can; only one of them finds rows. Each tenant's groups are numbered in
--   the order of the deal (round), so the slots granted go to the first
--   rounds and the prefetched groups follow. A group holds one tenant's rows.
-- * sized numbers each endpoint's rows in order (rank) and reads each payload's
--   size in bytes (octet_length of the text: what the dispatcher will hold),
--   by a probe per row rather than a join (see claimed below).
-- * grouped keeps the rows while the bytes before them are under the budget,
--   counted over the endpoints in rotation (each one's first row in the order
--   asked, then each one's second, ...) so that one endpoint's large events do
--   not crowd out the others. The first row always goes (an event larger than
--   the budget is still sent); the rows left out stay pending, their locks go
--   at commit. Each endpoint keeps a prefix of its rows, so the per-key order
--   holds. Requests hold 4 MiB at most, but without a budget a claim brought
--   up to --batch-size payloads at once (300 of 1 MiB: 618 MiB resident).
-- * grouped numbers the requests: grp = rank / max_batch. Groups below
--   the slots granted start now, with the slot of the same rank; the others
--   wait. Slots beyond the groups found are left as they were (free).
-- * The UPDATEs lease the deliveries (a token per row, every later write is
--   guarded by it), lease the slots used, move a rate limit's next turn past
--   the turns used, and put a probed circuit in half-open. (A data-modifying
--   CTE runs to completion whether or not the query reads it.)
-- * Turns are read on clock_timestamp(), not now(): now() is when the
--   statement began, and a request told "your turn was 30 ms ago" by a claim
--   that took 30 ms would go out at once, bunched with the next claim's
--   requests. The first turn is taken when the rows are locked, and each
--   request's wait (send_in) as late as the statement can say it, so
--   requests go out at their turn plus only the answer's trip. turn_at gives
--   each request's turn as a moment, which the dispatcher holds against the
--   statement's start (db_now) to see how late a request would leave, the time
--   this answer took to be read included (dispatcher.limits.rate).
-- * Turns are pace/rate apart, not 1/rate (pace: 1.05, dispatcher.limits.rate
--   says why).
-- * Runs in autocommit at READ COMMITTED: under REPEATABLE READ a row updated
--   concurrently would abort the claim with 40001 instead of being skipped.
WITH wanted AS (
    SELECT w.endpoint_id, w.pos, w.requests, w.held, w.prefetch, w.rows, w.floor, e.max_batch,
           w.ring_after, w.ring_null,
           e.rate_limit / %(pace)s::float8 AS rate_limit,  -- the pace; see "Turns" above
           e.breaker_cooldown_seconds AS cooldown, s.circuit,
           s.circuit = 'closed' AND e.rate_limit IS NULL AS free_running,
           outbox.circuit_probe_due_v1(s.circuit, s.opened_at, e.breaker_cooldown_seconds,
                                       s.probe_until) AS probe_due
    FROM unnest(%(endpoint_ids)s::bigint[], %(requests)s::int[], %(held)s::int[],
                %(prefetch)s::int[], %(rows)s::int[], %(floors)s::timestamptz[],
                %(ring_after)s::text[], %(ring_null)s::boolean[]) WITH ORDINALITY
         AS w(endpoint_id, requests, held, prefetch, rows, floor, ring_after, ring_null, pos)
    JOIN outbox.endpoints e ON e.id = w.endpoint_id AND e.enabled AND e.removed_at IS NULL
    JOIN outbox.endpoint_state s ON s.endpoint_id = w.endpoint_id
),
gated AS MATERIALIZED (
    SELECT s.endpoint_id, s.next_turn,
           s.circuit = 'closed' AS closed,
           outbox.circuit_probe_due_v1(s.circuit, s.opened_at, w.cooldown,
                                       s.probe_until) AS probe_due
    FROM outbox.endpoint_state s
    JOIN wanted w ON w.endpoint_id = s.endpoint_id
    WHERE w.rate_limit IS NOT NULL OR w.probe_due
    FOR NO KEY UPDATE OF s SKIP LOCKED
),
allowance AS (
    SELECT w.endpoint_id, w.pos, w.held, w.prefetch, w.rows, w.floor, w.max_batch,
           w.ring_after, w.ring_null, w.rate_limit, w.free_running, g.next_turn,
           g.probe_due AND NOT g.closed AS probe,
           CASE
               WHEN w.free_running THEN w.requests
               WHEN g.endpoint_id IS NULL THEN 0  -- gated, but another claimer holds it
               WHEN g.probe_due AND NOT g.closed THEN least(w.requests, 1)
               WHEN NOT g.closed THEN 0
               WHEN w.rate_limit IS NULL THEN w.requests
               ELSE outbox.rate_turns_v1(g.next_turn, w.rate_limit, %(horizon)s, w.requests)
           END AS allowed
    FROM wanted w
    LEFT JOIN gated g ON g.endpoint_id = w.endpoint_id
),
slots AS MATERIALIZED (
    SELECT a.endpoint_id, f.slot,
           row_number() OVER (PARTITION BY a.endpoint_id ORDER BY f.slot) - 1 AS rank
    FROM allowance a
    CROSS JOIN LATERAL (
        SELECT sl.slot
        FROM outbox.endpoint_slots sl
        WHERE sl.endpoint_id = a.endpoint_id AND outbox.slot_free_v1(sl.expires_at)
        ORDER BY sl.slot
        LIMIT a.allowed
        FOR UPDATE OF sl SKIP LOCKED
    ) f
),
limits AS MATERIALIZED (
    SELECT a.*, g.granted, z.wanted_rows,
           ceil(z.wanted_rows::numeric / a.max_batch::numeric)::int AS groups_wanted
    FROM allowance a
    CROSS JOIN LATERAL (SELECT count(*)::int AS granted FROM slots s
                        WHERE s.endpoint_id = a.endpoint_id) g
    CROSS JOIN LATERAL (SELECT least(a.rows, a.max_batch * (g.granted + CASE
               WHEN a.free_running THEN least(a.prefetch, a.held + g.granted) ELSE 0 END))
               AS wanted_rows) z
),
-- sole: the tenant of the endpoint's earliest pending row from its floor, and
-- whether no pending row of another tenant exists: one to three descents of
-- deliveries_turns, whose entries go by tenant, the untenanted last. Each
-- look is a scalar sub-select ordered as that index is, so that no plan can
-- read the endpoint's rows instead (an EXISTS loses its ORDER BY and LIMIT,
-- and its plan bets on an early match: a scan of every row when none is).
sole AS MATERIALIZED (
    SELECT l.endpoint_id, f.tenant,
           CASE WHEN f.tenant IS NULL THEN (
                    SELECT true FROM outbox.deliveries d
                    WHERE d.endpoint_id = l.endpoint_id AND d.state = 'pending'
                      AND d.tenant IS NOT NULL
                    ORDER BY d.tenant LIMIT 1) IS NULL
                ELSE (SELECT true FROM outbox.deliveries d
                      WHERE d.endpoint_id = l.endpoint_id AND d.state = 'pending'
                        AND d.tenant IS NULL AND d.next_attempt_at >= l.floor
                      ORDER BY d.tenant, d.next_attempt_at LIMIT 1) IS NULL
                 AND (SELECT true FROM outbox.deliveries d
                      WHERE d.endpoint_id = l.endpoint_id AND d.state = 'pending'
                        AND d.tenant < f.tenant
                      ORDER BY d.tenant LIMIT 1) IS NULL
                 AND (SELECT true FROM outbox.deliveries d
                      WHERE d.endpoint_id = l.endpoint_id AND d.state = 'pending'
                        AND d.tenant > f.tenant
                      ORDER BY d.tenant LIMIT 1) IS NULL
           END AS alone
    FROM limits l
    CROSS JOIN LATERAL (
        SELECT d.tenant FROM outbox.deliveries d
        WHERE d.endpoint_id = l.endpoint_id AND d.state = 'pending'
          AND d.next_attempt_at >= l.floor
        ORDER BY d.next_attempt_at
        LIMIT 1) f
    WHERE l.wanted_rows > 0
),
dealt AS MATERIALIZED (
    SELECT l.endpoint_id, t.*
    FROM limits l
    JOIN sole o ON o.endpoint_id = l.endpoint_id
    CROSS JOIN LATERAL (
        SELECT o.tenant, o.tenant IS NULL, 1, 0, l.groups_wanted
        WHERE o.alone
        UNION ALL
        SELECT * FROM outbox.tenant_turns_v1(l.endpoint_id, l.floor, l.ring_after, l.ring_null,
                                             l.groups_wanted, l.max_batch, %(ring_steps)s)
        WHERE NOT o.alone
    ) t (tenant, untenanted, place, ahead, requests)
),
locked AS MATERIALIZED (
    SELECT l.endpoint_id, l.pos, l.wanted_rows, c.id, c.next_attempt_at, c.seq, t.place,
           (row_number() OVER (PARTITION BY l.endpoint_id, t.place
                               ORDER BY c.next_attempt_at, c.seq) - 1) / l.max_batch
           + t.ahead AS round,
           (SELECT octet_length(e.payload::text) FROM outbox.events e
            WHERE e.id = c.event_id) AS size
    FROM dealt t
    JOIN limits l ON l.endpoint_id = t.endpoint_id
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT d.id, d.event_id, d.next_attempt_at, d.seq FROM outbox.deliveries d
            WHERE d.endpoint_id = l.endpoint_id AND d.tenant = t.tenant AND d.state = 'pending'
              AND d.next_attempt_at <= now() AND d.next_attempt_at >= l.floor
              AND (d.key IS NULL OR NOT EXISTS (
                    SELECT FROM outbox.key_blockers_v1(d.endpoint_id, d.key, d.tenant, d.seq)))
            ORDER BY d.next_attempt_at LIMIT t.requests * l.max_batch
            FOR UPDATE OF d SKIP LOCKED) named
        UNION ALL
        SELECT * FROM (
            SELECT d.id, d.event_id, d.next_attempt_at, d.seq FROM outbox.deliveries d
            WHERE t.untenanted AND d.endpoint_id = l.endpoint_id AND d.tenant IS NULL
              AND d.state = 'pending'
              AND d.next_attempt_at <= now() AND d.next_attempt_at >= l.floor
              AND (d.key IS NULL OR NOT EXISTS (
                    SELECT FROM outbox.key_blockers_v1(d.endpoint_id, d.key, NULL, d.seq)))
            ORDER BY d.next_attempt_at LIMIT t.requests * l.max_batch
            FOR UPDATE OF d SKIP LOCKED) untenanted
    ) c
),
sized AS MATERIALIZED (
    SELECT r.id, r.endpoint_id, r.seq, r.pos, r.size, r.wanted_rows,
           dense_rank() OVER (PARTITION BY r.endpoint_id ORDER BY r.round, r.place) - 1 AS grp,
           row_number() OVER (PARTITION BY r.endpoint_id
                              ORDER BY r.round, r.place, r.next_attempt_at, r.seq) - 1 AS rank
    FROM locked r
),
grouped AS MATERIALIZED (
    SELECT r.id, r.endpoint_id, r.seq, r.size, r.grp
    FROM (SELECT s.*, sum(s.size) OVER (ORDER BY s.rank, s.pos ROWS UNBOUNDED PRECEDING)
                      - s.size AS before
          FROM sized s) r
    WHERE r.before < %(budget)s AND r.rank < r.wanted_rows
),
next_pending AS MATERIALIZED (
    SELECT l.endpoint_id,
           (SELECT d.next_attempt_at
            FROM outbox.deliveries d
            WHERE d.endpoint_id = l.endpoint_id
              AND d.state = 'pending'
              AND d.next_attempt_at >= l.floor
              AND d.id NOT IN (SELECT g.id FROM grouped g)  -- hashed: one probe a row
            ORDER BY d.next_attempt_at
            LIMIT 1) AS at
    FROM limits l
    WHERE l.endpoint_id IN (SELECT g.endpoint_id FROM grouped g)
),
used AS MATERIALIZED (
    SELECT l.endpoint_id, l.rate_limit, l.probe,
           greatest(l.next_turn, clock_timestamp()) AS first_turn,
           least(l.granted, (SELECT count(DISTINCT g.grp) FROM grouped g
                             WHERE g.endpoint_id = l.endpoint_id))::int AS groups
    FROM limits l
),
leased_slots AS (
    UPDATE outbox.endpoint_slots sl
    SET lease_token = gen_random_uuid(),
        expires_at = now() + make_interval(secs => %(lease_seconds)s)
    FROM slots s
    JOIN used u ON u.endpoint_id = s.endpoint_id
    WHERE sl.endpoint_id = s.endpoint_id AND sl.slot = s.slot AND s.rank < u.groups
    RETURNING sl.endpoint_id, s.rank, sl.slot, sl.lease_token
),
-- Per endpoint, the slots in rank order: group n runs in element n + 1 (an array
-- lookup, where a join of the rows with the slots would compare every pair).
handed AS MATERIALIZED (
    SELECT endpoint_id, array_agg(slot ORDER BY rank) AS slots,
           array_agg(lease_token ORDER BY rank) AS tokens
    FROM leased_slots
    GROUP BY endpoint_id
),
turned AS (
    UPDATE outbox.endpoint_state st
    SET next_turn = CASE WHEN u.rate_limit IS NULL THEN st.next_turn
                         ELSE outbox.rate_next_turn_v1(u.first_turn, u.groups, u.rate_limit)
                    END,
        circuit = CASE WHEN u.probe THEN 'half-open' ELSE st.circuit END,
        probe_until = CASE WHEN u.probe
                           THEN now() + make_interval(secs => %(lease_seconds)s)
                           ELSE st.probe_until END
    FROM used u
    WHERE st.endpoint_id = u.endpoint_id AND u.groups > 0
      AND (u.rate_limit IS NOT NULL OR u.probe)
    RETURNING st.endpoint_id
),
-- The rows to lease as arrays, one row: unnested below, they drive the UPDATE.
packed AS MATERIALIZED (
    SELECT array_agg(id) AS ids, array_agg(grp) AS grps, array_agg(size) AS sizes
    FROM grouped
),
claimed AS (
    UPDATE outbox.deliveries d
    SET state = 'in_flight',
        attempts = d.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    -- Unnested arrays, not a join with grouped: the planner cannot estimate
    -- the LATERAL's row count and would hash-join the whole table (seen: 900
    -- ms with 350k rows); an unnested array counts as 10 rows, so each is a
    -- primary-key probe. Each row brings its group and size along: a join of
    -- the result with grouped, two CTEs the planner takes for a few rows,
    -- became a nested loop comparing every pair (50 ms for 1,000 rows).
    FROM packed p
    CROSS JOIN LATERAL unnest(p.ids, p.grps, p.sizes) AS g (id, grp, size)
    WHERE d.id = g.id
    RETURNING d.id, d.endpoint_id, d.event_id, d.attempts, d.lease_token, d.seq, g.grp, g.size
)
SELECT c.id, c.endpoint_id, c.attempts, c.lease_token, c.event_id, e.type, e.key,
       e.payload::text, e.headers::text, e.created_at, c.grp,
       h.slots[c.grp + 1] AS slot, h.tokens[c.grp + 1] AS slot_token,
       CASE WHEN u.rate_limit IS NULL OR h.slots[c.grp + 1] IS NULL THEN 0.0
            ELSE greatest(0.0, extract(epoch FROM u.first_turn - clock_timestamp())::float8
                               + c.grp::float8 / u.rate_limit) END AS send_in,
       coalesce(u.probe, false) AS probe,
       -- The event's age now, on the database clock: the dispatcher's may be off.
       extract(epoch FROM now() - e.created_at)::float8 AS age,
       e.traceparent, e.tracestate, c.size,
       -- Capped at now(): never 'infinity' (rows parked behind their key).
       least(n.at, now()) AS next_pending, now() AS db_now,
       pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
       e.tenant,
       -- The request's turn on the database clock (NULL: no rate limit), for the
       -- dispatcher to tell how late it leaves whatever delayed this answer.
       u.first_turn + make_interval(secs => c.grp::double precision / u.rate_limit) AS turn_at
FROM claimed c
JOIN outbox.events e ON e.id = c.event_id
JOIN used u ON u.endpoint_id = c.endpoint_id
JOIN next_pending n ON n.endpoint_id = c.endpoint_id
LEFT JOIN handed h ON h.endpoint_id = c.endpoint_id
ORDER BY c.endpoint_id, c.grp, c.seq;

-- name: due_endpoints
-- The endpoints that have due work, for the claim to look at: a claim then
-- costs what the work costs, however many endpoints exist. A loose index scan
-- over deliveries_pending, (endpoint_id, next_attempt_at) WHERE pending:
-- each step is one descent to the first pending row of the next endpoint, and
-- that row is the endpoint's earliest, so it tells whether anything is due.
-- Endpoints without pending rows cost nothing; those whose rows all wait
-- (retries backing off, parked keys) cost one descent each.
--
-- The walk starts after %(after)s (the claimer's cursor: the last endpoint it
-- served) and goes round once, so that endpoints take turns in id order when
-- more have work than the dispatcher has request slots. It stops after
-- %(want)s endpoints it may claim for now (enabled, not removed, circuit
-- closed or due its probe, a rate limit's next turn within the claim's
-- horizon), or after %(budget)s steps; the last row walked
-- always comes back, so the claimer can tell a walk cut short by the budget
-- (visited = budget) and go on from there.
--
-- Endpoints in %(floor_ids)s (ascending) are looked at from their floors
-- (%(floors)s; see the claim's locked): a descent to an endpoint's first
-- pending row walks every entry of the rows claimed since the MVCC horizon
-- was last let go. A step goes to the first pending row of the endpoints
-- between the current one and the next with a floor, else to that one's first
-- row from its floor ('infinity' when it has none: visited, not eligible).
-- The lateral's UNION ALL ... LIMIT 1 reads a branch only when those before it
-- found nothing: the last two go back to the lowest endpoint id (the walk's
-- one wrap-around).
WITH RECURSIVE floors AS MATERIALIZED (
    SELECT f.endpoint_id, f.floor
    FROM unnest(%(floor_ids)s::bigint[], %(floors)s::timestamptz[]) AS f(endpoint_id, floor)
),
walk (endpoint_id, lap, visited, found, eligible) AS (
    SELECT %(after)s::bigint, 0, 0, 0, false
    UNION ALL
    SELECT n.endpoint_id, n.lap, w.visited + 1, w.found + n.eligible::int, n.eligible
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT nx.endpoint_id, nx.lap,
               coalesce(nx.next_attempt_at <= now() AND e.enabled AND e.removed_at IS NULL
                        AND (e.rate_limit IS NULL
                             OR outbox.rate_turn_near_v1(s.next_turn, %(horizon)s))
                        AND (s.circuit = 'closed'
                             OR outbox.circuit_probe_due_v1(s.circuit, s.opened_at,
                                                            e.breaker_cooldown_seconds,
                                                            s.probe_until)),
                        false) AS eligible
        FROM ((SELECT d.endpoint_id, d.next_attempt_at, w.lap
               FROM outbox.deliveries d
               WHERE d.state = 'pending' AND d.endpoint_id > w.endpoint_id
                 AND d.endpoint_id < coalesce((SELECT min(f.endpoint_id) FROM floors f
                                               WHERE f.endpoint_id > w.endpoint_id),
                                              9223372036854775807)
               ORDER BY d.endpoint_id, d.next_attempt_at
               LIMIT 1)
              UNION ALL
              (SELECT y.endpoint_id,
                      coalesce((SELECT d.next_attempt_at FROM outbox.deliveries d
                                WHERE d.state = 'pending' AND d.endpoint_id = y.endpoint_id
                                  AND d.next_attempt_at >= y.floor
                                ORDER BY d.next_attempt_at
                                LIMIT 1), 'infinity'), w.lap
               FROM (SELECT f.endpoint_id, f.floor FROM floors f
                     WHERE f.endpoint_id > w.endpoint_id
                     ORDER BY f.endpoint_id
                     LIMIT 1) y)
              UNION ALL
              (SELECT d.endpoint_id, d.next_attempt_at, 1
               FROM outbox.deliveries d
               WHERE d.state = 'pending' AND w.lap = 0
                 AND d.endpoint_id < coalesce((SELECT min(f.endpoint_id) FROM floors f),
                                              9223372036854775807)
               ORDER BY d.endpoint_id, d.next_attempt_at
               LIMIT 1)
              UNION ALL
              (SELECT y.endpoint_id,
                      coalesce((SELECT d.next_attempt_at FROM outbox.deliveries d
                                WHERE d.state = 'pending' AND d.endpoint_id = y.endpoint_id
                                  AND d.next_attempt_at >= y.floor
                                ORDER BY d.next_attempt_at
                                LIMIT 1), 'infinity'), 1
               FROM (SELECT f.endpoint_id, f.floor FROM floors f
                     WHERE w.lap = 0
                     ORDER BY f.endpoint_id
                     LIMIT 1) y)
              LIMIT 1) nx
        LEFT JOIN outbox.endpoints e ON e.id = nx.endpoint_id
        LEFT JOIN outbox.endpoint_state s ON s.endpoint_id = nx.endpoint_id
    ) n
    WHERE w.found < %(want)s AND w.visited < %(budget)s
      AND (n.lap = 0 OR n.endpoint_id <= %(after)s)
)
SELECT endpoint_id, eligible, visited
FROM walk
WHERE visited > 0 AND (eligible OR visited = (SELECT max(visited) FROM walk))
ORDER BY visited;

-- name: complete
-- Record the outcomes of finished attempts, many in one statement.
-- Guarded by lease token and state: a dispatcher whose lease expired (and
-- whose delivery another dispatcher took over) changes nothing here, so a
-- late result can never overwrite the new owner's. Returns the rows written.
-- The batch travels as JSON arrays of arrays: one C-level json.dumps in the
-- dispatcher instead of many Python-level array adaptations. The results are
-- read as jsonb, parsed once: json's ->> parses its element again for every
-- field taken (nine per result), which cost more than the rest of the
-- statement's work per row (benchmarks/history.py: 16.4 us per result with
-- json and seven fields, 13.1 with jsonb and nine).
--
-- results: [id, token, state, delay, error, status, refund, reason, duration].
-- 'released' is a hand-back (pending again, due now, last error kept); refund
-- takes back the attempt the claim charged (a hand-back, or a failed circuit
-- probe: that one was made, so attempts_before keeps counting it for the
-- history's numbering). reason is set for a failed attempt only: each such
-- result adds its row to the attempt history (the history CTE), numbered
-- attempts_before + attempts; a success adds none, so the all-success batch
-- writes nothing more than before (duration goes into the row it updates).
-- slots: [endpoint_id, slot, token] of requests that ended: free again.
-- Row locks: deliveries first, in id order (locked), then request slots in
-- (endpoint, slot) order, as extend_leases takes them: two statements waiting
-- for each other's rows could otherwise deadlock (a result and the lease
-- renewal of one dispatcher touch the same rows). A parked successor is
-- skipped when another statement holds it (unpark_orphans catches it).
-- Deliveries delivered or dead leave their endpoint's --max-pending count.
-- circuits: [endpoint_id, answered, failures, earlier] per endpoint of the
-- batch: its attempts answered (anything but a retryable failure), those that
-- failed retryably, and the answers this dispatcher kept to itself since the
-- window last counted them, per bucket, newest first (limits.circuit.Tally). The state rows are locked
-- in endpoint order (two dispatchers' results cannot deadlock on them) and
-- written only while failures count (the batch's, or the window's), so a
-- healthy endpoint's results never touch its row. A closed circuit opens when
-- the window (--breaker-window) holds --breaker-failures failures and they
-- are --breaker-rate percent of its attempts; a half-open one closes on the
-- probe's answer and opens again on its failure; an open one waits for its
-- probe.
WITH r AS (
    SELECT (e->>0)::bigint AS id, (e->>1)::uuid AS token, e->>2 AS state,
           (e->>3)::float8 AS delay, e->>4 AS error, (e->>5)::int AS status,
           (e->>6)::boolean AS refund, e->>7 AS reason, (e->>8)::float8 AS duration
    FROM jsonb_array_elements(%(results)s::jsonb) AS e
),
-- locked takes the results' rows by primary key alone (the id array: a probe
-- per result), in id order, and keeps those whose lease and state match.
-- No condition on state reaches that scan: one would let the plan read the
-- in-flight index (every endpoint's rows in flight, and the dead entries it
-- keeps until a vacuum), estimated at a row or so whenever the statistics
-- were taken with little in flight, and then scan the results once per row
-- read: seen at 1,536 rows in flight, 1.2 million comparisons, 0.5-2.5 s
-- per completion. A row whose lease went to another dispatcher is locked
-- until this statement commits and left alone.
locked AS MATERIALIZED (
    SELECT r.*
    FROM r
    JOIN (SELECT d.id, d.lease_token, d.state
          FROM outbox.deliveries d
          WHERE d.id = ANY (ARRAY(SELECT x.id FROM r x))
          ORDER BY d.id
          OFFSET 0  -- keeps the state condition below out of this scan
          FOR NO KEY UPDATE OF d) d ON d.id = r.id
    WHERE d.lease_token = r.token AND d.state = 'in_flight'
),
finished AS (
    UPDATE outbox.deliveries d
    SET state = CASE WHEN r.state = 'released' THEN 'pending' ELSE r.state END,
        attempts = d.attempts - CASE WHEN r.refund THEN 1 ELSE 0 END,
        attempts_before = d.attempts_before
                          + CASE WHEN r.refund AND r.state <> 'released' THEN 1 ELSE 0 END,
        last_duration_seconds = CASE WHEN r.state = 'released' THEN d.last_duration_seconds
                                     ELSE r.duration END,
        lease_token = NULL,
        lease_expires_at = NULL,
        next_attempt_at = CASE WHEN r.state = 'pending'
                               THEN now() + make_interval(secs => r.delay)
                               WHEN r.state = 'released' THEN now()
                               ELSE d.next_attempt_at END,
        last_error = CASE WHEN r.state = 'released' THEN d.last_error ELSE r.error END,
        last_status = CASE WHEN r.state = 'released' THEN d.last_status ELSE r.status END,
        finished_at = CASE WHEN r.state IN ('delivered', 'dead') THEN now() END
    -- By id alone: locked holds these rows, their lease and state checked.
    FROM locked r
    WHERE d.id = r.id
    RETURNING d.id, d.endpoint_id, d.key, d.tenant, d.seq, d.state, r.reason, r.status,
              r.error, r.duration, d.attempts_before + d.attempts AS attempt
),
-- The attempt history: a row per failed attempt written above (guarded by the
-- same lease token), read from finished itself, so that no join is made.
history AS (
    INSERT INTO outbox.attempts (delivery_id, attempt, at, status, reason,
                                 duration_seconds, error)
    SELECT f.id, f.attempt, now(), f.status, f.reason, f.duration, f.error
    FROM finished f
    WHERE f.reason IS NOT NULL
),
-- A keyed delivery that finished hands its turn to the next event of its key
-- and tenant (key_next_v1): if that one was parked (see park_blocked), it
-- becomes due now.
unparked AS (
    UPDATE outbox.deliveries n
    SET next_attempt_at = now()
    WHERE n.id = ANY (ARRAY(
            SELECT q.id FROM outbox.deliveries q
            WHERE q.id = ANY (ARRAY(
                    SELECT x.id
                    FROM finished f
                    CROSS JOIN LATERAL outbox.key_next_v1(f.endpoint_id, f.key, f.tenant, f.seq) x(id)
                    WHERE f.key IS NOT NULL AND f.state IN ('delivered', 'dead')))
              AND q.state = 'pending' AND q.next_attempt_at = 'infinity'
            ORDER BY q.id
            FOR NO KEY UPDATE OF q SKIP LOCKED))
),
-- Deliveries that finished leave their endpoint's --max-pending count (shard
-- -1; bounded endpoints only), rows locked in endpoint order.
finished_counts AS MATERIALIZED (
    SELECT b.endpoint_id, f.n
    FROM (SELECT endpoint_id, count(*) AS n FROM finished
          WHERE state IN ('delivered', 'dead') GROUP BY endpoint_id) f
    JOIN outbox.endpoint_backlog b ON b.endpoint_id = f.endpoint_id AND b.shard = -1
    ORDER BY b.endpoint_id
    FOR NO KEY UPDATE OF b
),
uncounted AS (
    UPDATE outbox.endpoint_backlog b
    SET undelivered = b.undelivered - c.n
    FROM finished_counts c
    WHERE b.endpoint_id = c.endpoint_id AND b.shard = -1
),
ended_slots AS MATERIALIZED (
    SELECT sl.endpoint_id, sl.slot
    FROM json_array_elements(%(slots)s::json) AS f
    JOIN outbox.endpoint_slots sl
      ON sl.endpoint_id = (f->>0)::bigint AND sl.slot = (f->>1)::int
         AND sl.lease_token = (f->>2)::uuid
    ORDER BY sl.endpoint_id, sl.slot
    FOR NO KEY UPDATE OF sl
),
freed AS (
    UPDATE outbox.endpoint_slots sl
    SET lease_token = NULL, expires_at = '-infinity'
    FROM ended_slots e
    WHERE sl.endpoint_id = e.endpoint_id AND sl.slot = e.slot
),
reported AS (
    SELECT (c->>0)::bigint AS endpoint_id, (c->>1)::int AS answered,
           (c->>2)::int AS failures,
           ARRAY(SELECT n::int FROM json_array_elements_text(c->3) WITH ORDINALITY AS k(n, i)
                 ORDER BY k.i) AS earlier
    FROM json_array_elements(%(circuits)s::json) AS c
),
changing AS MATERIALIZED (
    -- Locked, a row is its latest version: the new values are computed from
    -- it, never from this statement's older snapshot. The window's counts as
    -- they stand now (shifted by the buckets begun since it was written).
    SELECT s.endpoint_id, s.circuit,
           outbox.circuit_window_v2(s.window_attempts, s.window_at,
                                    e.breaker_window_seconds) AS attempts,
           outbox.circuit_window_v2(s.window_failures, s.window_at,
                                    e.breaker_window_seconds) AS failures
    FROM outbox.endpoint_state s
    JOIN reported r ON r.endpoint_id = s.endpoint_id
    JOIN outbox.endpoints e ON e.id = s.endpoint_id
    WHERE outbox.circuit_touched_v2(s.circuit, e.breaker_failures, s.window_failures,
                                    r.failures)
    ORDER BY s.endpoint_id
    FOR NO KEY UPDATE OF s
),
-- The batch goes into the newest bucket (its answers and failures), and the
-- answers this dispatcher kept to itself while the window held no failure
-- into theirs.
judged AS (
    SELECT c.endpoint_id, c.circuit AS was,
           outbox.circuit_add_v2(c.attempts, r.earlier, r.answered + r.failures) AS attempts,
           outbox.circuit_add_v2(c.failures, '{}', r.failures) AS failures,
           outbox.circuit_window_at_v2(e.breaker_window_seconds) AS window_at,
           outbox.circuit_after_v2(
               c.circuit, e.breaker_failures, e.breaker_rate,
               outbox.circuit_sum_v2(c.attempts) + outbox.circuit_sum_v2(r.earlier)
                   + r.answered + r.failures,
               outbox.circuit_sum_v2(c.failures) + r.failures,
               r.answered, r.failures) AS circuit
    FROM changing c
    JOIN reported r ON r.endpoint_id = c.endpoint_id
    JOIN outbox.endpoints e ON e.id = c.endpoint_id
),
circuits AS (
    -- A circuit that closes starts its count afresh (and the previous
    -- release's consecutive count with it).
    UPDATE outbox.endpoint_state s
    SET circuit = j.circuit,
        failures = CASE WHEN j.circuit = 'closed' AND j.was <> 'closed' THEN 0
                        ELSE s.failures END,
        opened_at = CASE WHEN j.circuit = 'open' AND j.was <> 'open' THEN now()
                         ELSE s.opened_at END,
        probe_until = CASE WHEN j.circuit = 'half-open' THEN s.probe_until END,
        window_at = CASE WHEN j.circuit = 'closed' AND j.was <> 'closed' THEN NULL
                         ELSE j.window_at END,
        window_attempts = CASE WHEN j.circuit = 'closed' AND j.was <> 'closed' THEN '{}'
                               ELSE j.attempts END,
        window_failures = CASE WHEN j.circuit = 'closed' AND j.was <> 'closed' THEN '{}'
                               ELSE j.failures END
    FROM judged j
    WHERE s.endpoint_id = j.endpoint_id
    RETURNING s.endpoint_id, j.was, s.circuit
)
-- One row: the ids of the deliveries written, the circuits that changed as
-- [endpoint_id, before, after], and the endpoints whose window counted this
-- batch (policy.model.Completed reads it).
SELECT ARRAY(SELECT id FROM finished) AS written,
       (SELECT coalesce(json_agg(json_build_array(endpoint_id, was, circuit)), '[]')
        FROM circuits WHERE was <> circuit) AS changed,
       ARRAY(SELECT endpoint_id FROM circuits) AS counted;

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
      AND EXISTS (SELECT FROM outbox.key_blockers_v1(d.endpoint_id, d.key, d.tenant, d.seq))
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
-- deliveries_pending), and for each of them only its head (key_next_v1 from
-- the start), which the UPDATE makes due if it is still parked.
WITH parked_keys AS (
    SELECT DISTINCT d.endpoint_id, d.key, d.tenant
    FROM outbox.endpoints e
    JOIN outbox.deliveries d
      ON d.endpoint_id = e.id AND d.state = 'pending' AND d.next_attempt_at = 'infinity'
),
heads AS (
    SELECT h.id
    FROM parked_keys k
    CROSS JOIN LATERAL outbox.key_next_v1(k.endpoint_id, k.key, k.tenant, 0) h(id)
),
-- Row locks in id order, as every statement that waits for them takes them.
locked AS MATERIALIZED (
    SELECT d.id FROM outbox.deliveries d
    WHERE d.id = ANY (ARRAY(SELECT id FROM heads))
      AND d.state = 'pending' AND d.next_attempt_at = 'infinity'
    ORDER BY d.id
    FOR NO KEY UPDATE OF d
)
UPDATE outbox.deliveries d
SET next_attempt_at = now()
FROM locked l
WHERE d.id = l.id AND d.state = 'pending' AND d.next_attempt_at = 'infinity'
RETURNING d.id, pg_notify('outbox_wakeup', '');

-- name: extend_leases
-- Keep the leases of deliveries still being worked on, and of the request
-- slots still held. Only the expiry changes and no index covers it, so both
-- are HOT updates. Row locks as the complete statement takes them (its results
-- touch the same rows): deliveries first, in id order, then slots in (endpoint,
-- slot) order; in the order the dispatcher lists them, the two deadlocked.
WITH held AS MATERIALIZED (
    SELECT d.id
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
    JOIN outbox.deliveries d ON d.id = r.id AND d.lease_token = r.token
                                AND d.state = 'in_flight'
    ORDER BY d.id
    FOR NO KEY UPDATE OF d
),
kept AS (
    UPDATE outbox.deliveries d
    SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    FROM held h
    WHERE d.id = h.id
    RETURNING d.id
),
held_slots AS MATERIALIZED (
    SELECT sl.endpoint_id, sl.slot
    FROM json_array_elements(%(slots)s::json) AS f
    JOIN outbox.endpoint_slots sl
      ON sl.endpoint_id = (f->>0)::bigint AND sl.slot = (f->>1)::int
         AND sl.lease_token = (f->>2)::uuid
    WHERE (SELECT count(*) FROM kept) >= 0  -- after the deliveries
    ORDER BY sl.endpoint_id, sl.slot
    FOR NO KEY UPDATE OF sl
)
UPDATE outbox.endpoint_slots sl
SET expires_at = now() + make_interval(secs => %(lease_seconds)s)
FROM held_slots h
WHERE sl.endpoint_id = h.endpoint_id AND sl.slot = h.slot;

-- name: rescue_expired
-- Deliveries whose lease ran out (their dispatcher died or froze) go back to
-- pending. The guard is state plus expiry, in one statement, so a delivery
-- that was completed or re-leased meanwhile is never touched. The attempt
-- stays charged: it may have reached the endpoint. Every dispatcher is woken
-- (at commit): the maintainer that ran this is only one of them.
-- Rows locked in id order first, as every statement that waits for them does.
WITH expired AS MATERIALIZED (
    SELECT id FROM outbox.deliveries
    WHERE state = 'in_flight' AND lease_expires_at < now()
    ORDER BY id
    FOR NO KEY UPDATE
),
rescued AS (
    UPDATE outbox.deliveries d
    SET state = 'pending', lease_token = NULL, lease_expires_at = NULL, next_attempt_at = now()
    FROM expired x
    WHERE d.id = x.id AND d.state = 'in_flight' AND d.lease_expires_at < now()
    RETURNING d.id
)
SELECT id, (SELECT pg_notify('outbox_wakeup', '') WHERE EXISTS (SELECT 1 FROM rescued))
FROM rescued;

-- name: maintainer_lease
-- Take the fleet's maintenance lease when it is free or expired, or keep it
-- when we hold it; a row comes back only to the holder. Two dispatchers
-- racing for an expired lease: the second waits for the first's row lock,
-- then finds the lease taken (READ COMMITTED re-checks the WHERE) and gets
-- nothing. Times are the database's, never a dispatcher's clock.
UPDATE outbox.maintainer
SET holder = %(me)s, expires_at = now() + make_interval(secs => %(seconds)s)
WHERE holder = %(me)s OR expires_at < now()
RETURNING holder;

-- name: maintainer_resign
-- A dispatcher stopping hands the lease on at once instead of letting it expire.
UPDATE outbox.maintainer SET expires_at = '-infinity' WHERE holder = %(me)s;

-- name: bury_removed
-- A publish that was already under way when its endpoint was removed can still
-- add pending deliveries for it. Nothing would ever claim them (the claim
-- skips removed endpoints): dead-letter them, so that nothing waits forever.
-- Rows locked in id order first, as every statement that waits for them does.
WITH removed AS MATERIALIZED (
    SELECT d.id
    FROM outbox.endpoints e
    JOIN outbox.deliveries d ON d.endpoint_id = e.id AND d.state = 'pending'
    WHERE e.removed_at IS NOT NULL
    ORDER BY d.id
    FOR NO KEY UPDATE OF d
)
UPDATE outbox.deliveries d
SET state = 'dead', last_error = 'endpoint removed while this delivery was pending',
    finished_at = now(),
    lease_token = NULL, lease_expires_at = NULL
FROM removed r
WHERE d.id = r.id AND d.state = 'pending';

-- name: discard_over
-- The endpoints' policies (docs/concepts.md, "When the backlog is full" and
-- "Stop sending"), applied by the fleet's maintainer about once a second
-- while an endpoint has one: the dispatcher passes their ids, so that a
-- database without a policy never runs this. Pending deliveries are
-- discarded (state 'discarded', finished, last_error saying why):
-- * at an endpoint disabled with --drop (dropping): every one, whoever made it;
-- * at a --when-full drop-oldest endpoint past a bound (backlog_over_v1, a
--   look at its counter while it keeps within them): a tenant past
--   --max-pending-per-tenant loses its oldest pending (by publish order,
--   seq), its own only, as many as it holds undelivered past the bound
--   (tenant_doomed); then the endpoint loses its oldest pending of the rest,
--   as many as it still holds past --max-pending (endpoint_doomed).
--   Deliveries in flight are never discarded; they count against the bounds.
-- Each "oldest" is a top-N (ORDER BY seq LIMIT the excess) over the
-- endpoint's (or the tenant's, through deliveries_turns) pending rows, and
-- the counts are index-only counts of its pending and in-flight rows: no
-- sort of the backlog, no window over it. (A rank over every pending row, the
-- first shape, took 540 ms a look at 100,000 pending; this takes a pass.)
-- The rows are chosen on one snapshot, then locked in id order (as every
-- writer of deliveries takes them) and written only where still pending: a
-- row claimed, finished or discarded meanwhile is skipped, never replaced by
-- a younger one. So two maintainers at once (the lease changing hands)
-- choose the same oldest rows and write each once: never more than needed,
-- never one counted twice (each dispatcher counts the rows its own statement
-- wrote, which come back here). A row another transaction holds is skipped
-- too (SKIP LOCKED): a claim about to send it, or an application's
-- disable(drop=True) whose transaction is still open, which the maintainer
-- must never wait for. What was skipped, the next round sees.
-- Discarded deliveries leave the --max-pending count (shard -1, locked after
-- the deliveries and in endpoint order, as complete takes them). A keyed
-- delivery discarded ahead of a parked one of its key hands nothing over:
-- the maintainer's sweep (unpark_orphans) makes that one due.
-- Cost: while every endpoint keeps within its bounds, its counter's 17 rows;
-- past them, a pass over its pending rows (and, with a bound per tenant
-- while it holds more than a tenant may, one over its undelivered rows).
WITH policy AS MATERIALIZED (
    SELECT e.id, e.dropping, e.max_pending, e.max_pending_per_tenant
    FROM outbox.endpoints e
    WHERE e.id = ANY (%(ids)s::bigint[]) AND e.removed_at IS NULL
      AND (e.dropping OR (e.when_full = 'drop-oldest' AND e.max_pending IS NOT NULL))
),
over AS MATERIALIZED (
    SELECT p.* FROM policy p
    WHERE p.dropping
       OR EXISTS (SELECT FROM outbox.backlog_over_v1(p.id, p.max_pending,
                                                     p.max_pending_per_tenant) b
                  WHERE b.over)
),
tenants AS MATERIALIZED (
    SELECT u.endpoint_id, u.tenant, count(*) AS held
    FROM (SELECT d.endpoint_id, d.tenant
          FROM over o
          JOIN outbox.deliveries d ON d.endpoint_id = o.id AND d.state = 'pending'
          WHERE NOT o.dropping AND o.max_pending_per_tenant IS NOT NULL
            AND d.tenant IS NOT NULL
          UNION ALL
          SELECT d.endpoint_id, d.tenant
          FROM over o
          JOIN outbox.deliveries d ON d.endpoint_id = o.id AND d.state = 'in_flight'
          WHERE NOT o.dropping AND o.max_pending_per_tenant IS NOT NULL
            AND d.tenant IS NOT NULL) u
    GROUP BY u.endpoint_id, u.tenant
),
tenant_doomed AS MATERIALIZED (
    SELECT x.id, o.id AS endpoint_id, o.max_pending_per_tenant AS bound
    FROM over o
    JOIN tenants t ON t.endpoint_id = o.id AND t.held > o.max_pending_per_tenant
    CROSS JOIN LATERAL (
        SELECT d.id FROM outbox.deliveries d
        WHERE d.endpoint_id = o.id AND d.tenant = t.tenant AND d.state = 'pending'
        ORDER BY d.seq, d.id
        LIMIT t.held - o.max_pending_per_tenant
    ) x
),
held AS MATERIALIZED (
    SELECT o.id, o.max_pending,
           (SELECT count(*) FROM outbox.deliveries d
            WHERE d.endpoint_id = o.id AND d.state = 'pending')
           + (SELECT count(*) FROM outbox.deliveries d
              WHERE d.endpoint_id = o.id AND d.state = 'in_flight')
           - (SELECT count(*) FROM tenant_doomed x WHERE x.endpoint_id = o.id) AS held
    FROM over o
    WHERE NOT o.dropping
),
endpoint_doomed AS MATERIALIZED (
    SELECT x.id, h.max_pending AS bound
    FROM held h
    CROSS JOIN LATERAL (
        SELECT d.id FROM outbox.deliveries d
        WHERE d.endpoint_id = h.id AND d.state = 'pending'
          AND d.id <> ALL (ARRAY(SELECT y.id FROM tenant_doomed y WHERE y.endpoint_id = h.id))
        ORDER BY d.seq, d.id
        LIMIT h.held - h.max_pending
    ) x
    WHERE h.held > h.max_pending
),
doomed AS MATERIALIZED (
    SELECT d.id, 'disabled' AS reason,
           'discarded: the endpoint was disabled with drop (stop sending)' AS why
    FROM over o
    JOIN outbox.deliveries d ON d.endpoint_id = o.id AND d.state = 'pending'
    WHERE o.dropping
    UNION ALL
    SELECT x.id, 'backlog-full',
           'discarded: its tenant held more than max_pending_per_tenant ('
           || x.bound::text || ') undelivered deliveries at the endpoint (when_full = drop-oldest)'
    FROM tenant_doomed x
    UNION ALL
    SELECT x.id, 'backlog-full',
           'discarded: the endpoint held more than max_pending (' || x.bound::text
           || ') undelivered deliveries (when_full = drop-oldest)'
    FROM endpoint_doomed x
),
locked AS MATERIALIZED (
    SELECT d.id FROM outbox.deliveries d
    WHERE d.id = ANY (ARRAY(SELECT x.id FROM doomed x)) AND d.state = 'pending'
    ORDER BY d.id
    FOR NO KEY UPDATE OF d SKIP LOCKED
),
discarded AS (
    UPDATE outbox.deliveries d
    SET state = 'discarded', finished_at = now(), last_error = x.why,
        lease_token = NULL, lease_expires_at = NULL
    FROM locked l
    JOIN doomed x ON x.id = l.id
    WHERE d.id = l.id AND d.state = 'pending'
    RETURNING d.endpoint_id, x.reason
),
counted AS MATERIALIZED (
    SELECT endpoint_id, reason, count(*) AS n FROM discarded GROUP BY endpoint_id, reason
),
shards AS MATERIALIZED (
    SELECT b.endpoint_id, c.n
    FROM (SELECT endpoint_id, sum(n)::bigint AS n FROM counted GROUP BY endpoint_id) c
    JOIN outbox.endpoint_backlog b ON b.endpoint_id = c.endpoint_id AND b.shard = -1
    ORDER BY b.endpoint_id
    FOR NO KEY UPDATE OF b
),
uncounted AS (
    UPDATE outbox.endpoint_backlog b
    SET undelivered = b.undelivered - s.n
    FROM shards s
    WHERE b.endpoint_id = s.endpoint_id AND b.shard = -1
)
SELECT endpoint_id, reason, n FROM counted ORDER BY endpoint_id, reason;

-- name: expire_dead
-- --keep-dead: the dead letters of these endpoints (the dispatcher passes
-- those that have keep_dead_seconds) that died longer ago than that are
-- discarded, by the maintainer's retention: at most batch_size per endpoint
-- and statement, the oldest first, each endpoint's read through
-- deliveries_finished as one range. A discarded row's finished_at is the
-- moment of the discard, so that it shows as discarded for the retention's
-- period before it goes; its last_error keeps the dead letter's, after the
-- why. Rows locked in id order, as every writer of deliveries takes them; one
-- retried meanwhile, or held by another transaction (SKIP LOCKED: the
-- maintainer never waits for one), is left alone, until the next round.
WITH doomed AS MATERIALIZED (
    SELECT x.id
    FROM outbox.endpoints e
    CROSS JOIN LATERAL (
        SELECT d.id FROM outbox.deliveries d
        WHERE d.state = 'dead' AND d.endpoint_id = e.id
          AND d.finished_at < now() - make_interval(secs => e.keep_dead_seconds)
        ORDER BY d.finished_at
        LIMIT %(batch_size)s
    ) x
    WHERE e.id = ANY (%(ids)s::bigint[]) AND e.removed_at IS NULL
      AND e.keep_dead_seconds IS NOT NULL
),
locked AS MATERIALIZED (
    SELECT d.id FROM outbox.deliveries d
    WHERE d.id = ANY (ARRAY(SELECT x.id FROM doomed x)) AND d.state = 'dead'
    ORDER BY d.id
    FOR NO KEY UPDATE OF d SKIP LOCKED
),
discarded AS (
    UPDATE outbox.deliveries d
    SET state = 'discarded', finished_at = now(),
        last_error = 'discarded: a dead letter kept longer than the endpoint''s keep_dead: '
                     || coalesce(d.last_error, '(no error recorded)')
    FROM locked l
    WHERE d.id = l.id AND d.state = 'dead'
    RETURNING d.endpoint_id
)
SELECT endpoint_id, count(*) FROM discarded GROUP BY endpoint_id ORDER BY endpoint_id;

-- name: disable_endpoint
-- A 410 Gone pauses the endpoint (what is published meanwhile waits for it);
-- disabled_by says so. An endpoint disabled meanwhile (a request in flight
-- answered after an operator's or the application's disable, with --drop or
-- not) stays as they left it.
UPDATE outbox.endpoints
SET enabled = false, disabled_reason = %(reason)s, disabled_by = 'gone', updated_at = now()
WHERE id = %(id)s AND removed_at IS NULL AND enabled;

-- name: endpoints_fingerprint
-- Whether any live endpoint changed since the last look, in one row: a digest
-- of every live endpoint's row version (xmin changes with each UPDATE,
-- however it is made: the outbox command, a migration, SQL by hand). The
-- dispatcher reloads only when it differs, so that idle dispatchers beside
-- thousands of endpoints read one row every few seconds, not thousands.
-- now() comes along for rotated secrets' overlaps, judged on the database clock.
SELECT coalesce(md5(string_agg(id::text || ':' || xmin::text, ',' ORDER BY id)), ''), now()
FROM outbox.endpoints
WHERE removed_at IS NULL;

-- name: endpoint_versions
-- Every live endpoint's row version, to find those that changed (few columns,
-- no secrets): only those are loaded again.
SELECT id, xmin::text
FROM outbox.endpoints
WHERE removed_at IS NULL;

-- name: load_endpoints
-- These endpoints' definitions (those still live), each with its row version.
-- now() comes along so that the dispatcher judges rotated secrets' overlaps
-- (previous_secrets' expires_at) on the database clock, never its own.
-- guarded (saved with its URL checked: the private-network guard applies to
-- it whatever the flags) and trace_context (false: no traceparent, no
-- tracestate) are schema 18's. The policies come as the maintainer needs
-- them: whether the backlog drops its oldest (a bound to drop to included),
-- whether the endpoint drops what is made for it, how long its dead letters
-- are kept.
SELECT id, name, url, secret, previous_secrets::text, max_attempts, timeout_seconds,
       min_backoff_seconds, max_backoff_seconds, max_in_flight, rate_limit, max_batch,
       format, headers::text, enabled, breaker_failures, breaker_window_seconds,
       send_tracestate, ca_file, client_cert, client_key, tenant, guarded, trace_context,
       when_full = 'drop-oldest' AND max_pending IS NOT NULL, dropping, keep_dead_seconds,
       now(), xmin::text
FROM outbox.endpoints
WHERE removed_at IS NULL AND id = ANY (%(ids)s::bigint[])
ORDER BY id;

-- name: ping
SELECT 1;

-- name: listen
-- Publishers notify outbox_wakeup at commit (see the publish query); endpoint
-- commands notify outbox_endpoints (see endpoints_admin_lock).
LISTEN outbox_wakeup; LISTEN outbox_endpoints;

-- name: listen_probe
-- The listener's round trip: a notification sent the way publishers send
-- theirs (through --dsn, maybe a transaction pooler) must reach the LISTEN
-- session. A pooler that hands LISTEN and NOTIFY to different server
-- connections (or drops what arrives on an idle one) fails it. The payload
-- names this probe; the claimer takes any outbox_wakeup as a hint only.
SELECT pg_catalog.pg_notify('outbox_wakeup', %(payload)s);

-- name: pending_count
-- What `outbox-dispatcher --once` leaves behind: pending deliveries (retries
-- not yet due, events delayed or waiting for their key, disabled endpoints'),
-- counted once at its end through the deliveries_pending index.
SELECT count(*) FROM outbox.deliveries WHERE state = 'pending';

-- name: heartbeat
-- This dispatcher is alive (see outbox.dispatchers), with the endpoints it
-- cannot serve and why. One row per process, upserted in place.
INSERT INTO outbox.dispatchers (id, host, pid, version, problems)
VALUES (%(me)s, %(host)s, %(pid)s, %(version)s, %(problems)s::jsonb)
ON CONFLICT (id) DO UPDATE SET seen_at = now(), problems = EXCLUDED.problems;

-- name: heartbeat_stop
DELETE FROM outbox.dispatchers WHERE id = %(me)s;

-- name: heartbeat_sweep
-- The maintainer forgets processes not seen for an hour (they died unannounced).
DELETE FROM outbox.dispatchers WHERE seen_at < now() - interval '1 hour';

