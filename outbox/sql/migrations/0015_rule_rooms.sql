-- Version 15: the fleet's rules get rooms of their own in the schema, as
-- named functions beside version 10's: tenants' rounds, the walk that deals
-- an endpoint's requests between its tenants (outbox.tenant_turns_v1, called
-- by the claim); the backlog bound, an endpoint's counter and a tenant's
-- count (backlog_v1, tenant_backlog_v1: publish, status, the tenant
-- backlogs); key order's next delivery of a key (key_next_v1: complete and
-- the orphan sweep).
--
-- Locks: CREATE FUNCTION and GRANT lock no table. The previous release's
-- dispatchers and publishers keep working: their statements do not call
-- these functions, and nothing they use changes.

-- Tenants' rounds (version 15): which tenants of one endpoint the claim's
-- requests go to, and how many each. The tenants with pending rows stand in a
-- ring (the names in order, then the deliveries without a tenant, one tenant
-- of their own); the walk goes round it once from the one after the tenant
-- served last (after_tenant; after_untenanted: the deliveries without one;
-- neither: from the start), over deliveries_turns, one descent per tenant,
-- whose first entry is its earliest pending row from scan_from on (so "due"
-- is exact). It stops when it has found wanted due tenants with nothing in
-- flight, or after steps tenants looked at; a walk cut short before any due
-- tenant gives the round to the tenant of the endpoint's earliest due row, so
-- a claim always takes due work. Each tenant's requests in flight anywhere in
-- the fleet (its in-flight rows, in groups of batch) are the rounds it waits
-- (ahead). The wanted requests are dealt in rounds: round j of a tenant with
-- k requests in flight is dealt as round j + k, in walk order (place) within
-- a round, each tenant up to the groups it has due (work-conserving: a tenant
-- alone takes every request). Two arms wherever one tenant's rows are read
-- (named, and without a tenant): `tenant IS NOT DISTINCT FROM` cannot use the
-- index, while `= tenant` and `IS NULL` each can; only one arm finds rows.
CREATE OR REPLACE FUNCTION outbox.tenant_turns_v1(
    endpoint bigint, scan_from timestamptz, after_tenant text, after_untenanted boolean,
    wanted integer, batch integer, steps integer)
RETURNS TABLE (tenant text, untenanted boolean, place integer, ahead integer, requests integer)
LANGUAGE sql STABLE PARALLEL SAFE ROWS 4 AS $$
    WITH RECURSIVE busy AS MATERIALIZED (
        SELECT d.tenant, pg_catalog.ceil(pg_catalog.count(*)::numeric
                                         OPERATOR(pg_catalog./) batch::numeric)::integer AS ahead
        FROM outbox.deliveries d
        WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
          AND d.state OPERATOR(pg_catalog.=) 'in_flight'
        GROUP BY d.tenant
    ),
    ring (tenant, untenanted, lap, visited, found, due, ahead) AS (
        SELECT after_tenant, after_untenanted, 0, 0, 0, false, 0
        UNION ALL
        SELECT n.tenant, n.untenanted, n.lap, w.visited OPERATOR(pg_catalog.+) 1,
               w.found OPERATOR(pg_catalog.+)
                   (n.due AND n.ahead OPERATOR(pg_catalog.=) 0)::integer,
               n.due, n.ahead
        FROM ring w
        CROSS JOIN LATERAL (
            SELECT x.tenant, x.untenanted, x.lap, x.at OPERATOR(pg_catalog.<=) pg_catalog.now(),
                   coalesce((SELECT b.ahead FROM busy b
                             WHERE b.tenant OPERATOR(pg_catalog.=) x.tenant
                                OR (b.tenant IS NULL AND x.untenanted)), 0)
            FROM ((SELECT d.tenant, false, w.lap, d.next_attempt_at
                   FROM outbox.deliveries d
                   WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
                     AND d.state OPERATOR(pg_catalog.=) 'pending'
                     AND NOT w.untenanted
                     AND d.tenant OPERATOR(pg_catalog.>) coalesce(w.tenant, '')
                     AND d.next_attempt_at OPERATOR(pg_catalog.>=) scan_from
                   ORDER BY d.tenant, d.next_attempt_at
                   LIMIT 1)
                  UNION ALL
                  (SELECT NULL, true, w.lap, d.next_attempt_at
                   FROM outbox.deliveries d
                   WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
                     AND d.state OPERATOR(pg_catalog.=) 'pending'
                     AND NOT w.untenanted AND d.tenant IS NULL
                     AND d.next_attempt_at OPERATOR(pg_catalog.>=) scan_from
                   ORDER BY d.next_attempt_at
                   LIMIT 1)
                  UNION ALL
                  (SELECT d.tenant, false, 1, d.next_attempt_at
                   FROM outbox.deliveries d
                   WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
                     AND d.state OPERATOR(pg_catalog.=) 'pending'
                     AND w.lap OPERATOR(pg_catalog.=) 0
                     AND (after_tenant IS NOT NULL OR after_untenanted)
                     AND d.tenant IS NOT NULL
                     AND d.next_attempt_at OPERATOR(pg_catalog.>=) scan_from
                   ORDER BY d.tenant, d.next_attempt_at
                   LIMIT 1)
                  UNION ALL
                  (SELECT NULL, true, 1, d.next_attempt_at
                   FROM outbox.deliveries d
                   WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
                     AND d.state OPERATOR(pg_catalog.=) 'pending'
                     AND w.lap OPERATOR(pg_catalog.=) 0 AND after_untenanted
                     AND d.tenant IS NULL
                     AND d.next_attempt_at OPERATOR(pg_catalog.>=) scan_from
                   ORDER BY d.next_attempt_at
                   LIMIT 1)
                  LIMIT 1) x (tenant, untenanted, lap, at)
        ) n (tenant, untenanted, lap, due, ahead)
        WHERE w.found OPERATOR(pg_catalog.<) wanted AND w.visited OPERATOR(pg_catalog.<) steps
          AND (n.lap OPERATOR(pg_catalog.=) 0 OR after_untenanted
               OR (NOT n.untenanted AND n.tenant OPERATOR(pg_catalog.<=) after_tenant))
    ),
    walked AS MATERIALIZED (
        SELECT w.tenant, w.untenanted, w.visited AS place, w.ahead FROM ring w WHERE w.due
    ),
    takers AS MATERIALIZED (
        SELECT * FROM walked
        UNION ALL
        SELECT h.tenant, h.tenant IS NULL, 0, 0
        FROM (SELECT d.tenant
              FROM outbox.deliveries d
              WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
                AND d.state OPERATOR(pg_catalog.=) 'pending'
                AND d.next_attempt_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                AND d.next_attempt_at OPERATOR(pg_catalog.>=) scan_from
              ORDER BY d.next_attempt_at
              LIMIT 1) h
        WHERE NOT EXISTS (SELECT FROM walked)
    ),
    demand AS MATERIALIZED (
        SELECT t.tenant, t.untenanted, t.place, t.ahead,
               CASE WHEN c.takers OPERATOR(pg_catalog.=) 1 THEN wanted
                    ELSE pg_catalog.ceil((SELECT pg_catalog.count(*) FROM (
                        (SELECT FROM outbox.deliveries d
                         WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
                           AND d.state OPERATOR(pg_catalog.=) 'pending'
                           AND d.tenant OPERATOR(pg_catalog.=) t.tenant
                           AND d.next_attempt_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                           AND d.next_attempt_at OPERATOR(pg_catalog.>=) scan_from
                         LIMIT c.cap)
                        UNION ALL
                        (SELECT FROM outbox.deliveries d
                         WHERE d.endpoint_id OPERATOR(pg_catalog.=) endpoint
                           AND d.state OPERATOR(pg_catalog.=) 'pending'
                           AND t.untenanted AND d.tenant IS NULL
                           AND d.next_attempt_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                           AND d.next_attempt_at OPERATOR(pg_catalog.>=) scan_from
                         LIMIT c.cap)) r)::numeric
                        OPERATOR(pg_catalog./) batch::numeric)::integer
               END AS groups
        FROM takers t
        CROSS JOIN (SELECT pg_catalog.count(*)::integer AS takers,
                           -- no taker could use more than this many rows
                           (greatest(1, wanted OPERATOR(pg_catalog.-)
                                        pg_catalog.count(*) FILTER (
                                            WHERE k.ahead OPERATOR(pg_catalog.=) 0)::integer
                                     OPERATOR(pg_catalog.+) 1)
                            OPERATOR(pg_catalog.*) batch)::bigint AS cap
                    FROM takers k) c
    )
    SELECT x.tenant, x.untenanted, x.place, x.ahead, pg_catalog.count(*)::integer
    FROM (SELECT d.*, pg_catalog.row_number() OVER (
                          ORDER BY j OPERATOR(pg_catalog.+) d.ahead, d.place) AS nth
          FROM demand d
          CROSS JOIN LATERAL pg_catalog.generate_series(
              0, least(d.groups, wanted) OPERATOR(pg_catalog.-) 1) j) x
    WHERE x.nth OPERATOR(pg_catalog.<=) wanted
    GROUP BY x.tenant, x.untenanted, x.place, x.ahead
$$;

-- The backlog bound (--max-pending): an endpoint's undelivered deliveries as
-- its counter's shards add up (outbox.endpoint_backlog, whose comment names
-- its writers); 0 for an endpoint without a bound, which has no counter.
-- Version 15; publish() checks it, `outbox status` shows it.
CREATE OR REPLACE FUNCTION outbox.backlog_v1(endpoint_id bigint)
RETURNS TABLE (held bigint)
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT coalesce(pg_catalog.sum(b.undelivered), 0)::bigint
    FROM outbox.endpoint_backlog b
    WHERE b.endpoint_id OPERATOR(pg_catalog.=) backlog_v1.endpoint_id
$$;

-- The backlog bound per tenant (--max-pending-per-tenant): a tenant's
-- undelivered deliveries at an endpoint, pending (through deliveries_turns)
-- and in flight (through deliveries_in_flight), each counted up to cap (NULL:
-- all of them), so that a check costs at most the bound's index entries,
-- however large the backlog. Version 15; publish() checks it, `outbox status
-- --tenants` shows it.
CREATE OR REPLACE FUNCTION outbox.tenant_backlog_v1(endpoint_id bigint, tenant text, cap bigint)
RETURNS TABLE (pending bigint, in_flight bigint)
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT (SELECT pg_catalog.count(*)
            FROM (SELECT FROM outbox.deliveries d
                  WHERE d.endpoint_id OPERATOR(pg_catalog.=) tenant_backlog_v1.endpoint_id
                    AND d.tenant OPERATOR(pg_catalog.=) tenant_backlog_v1.tenant
                    AND d.state OPERATOR(pg_catalog.=) 'pending'
                  LIMIT cap) p),
           (SELECT pg_catalog.count(*)
            FROM (SELECT FROM outbox.deliveries d
                  WHERE d.endpoint_id OPERATOR(pg_catalog.=) tenant_backlog_v1.endpoint_id
                    AND d.tenant OPERATOR(pg_catalog.=) tenant_backlog_v1.tenant
                    AND d.state OPERATOR(pg_catalog.=) 'in_flight'
                  LIMIT cap) f)
$$;

-- Key order: the next delivery of this key and tenant (NULL: no tenant, a
-- tenant of its own) for this endpoint after seq (0: the key's head, seqs
-- start at 1) that has not finished: the one whose turn comes when the
-- delivery at seq finishes. Version 15; the complete query hands the turn
-- over with it, the orphan sweep (unpark_orphans) finds a key's head.
CREATE OR REPLACE FUNCTION outbox.key_next_v1(
    endpoint_id bigint, key text, tenant text, seq bigint) RETURNS SETOF bigint
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT p.id FROM outbox.deliveries p
    WHERE p.endpoint_id OPERATOR(pg_catalog.=) key_next_v1.endpoint_id
      AND p.key OPERATOR(pg_catalog.=) key_next_v1.key
      AND (p.tenant OPERATOR(pg_catalog.=) key_next_v1.tenant
           OR (p.tenant IS NULL AND key_next_v1.tenant IS NULL))
      AND p.seq OPERATOR(pg_catalog.>) key_next_v1.seq
      AND p.state OPERATOR(pg_catalog.=) ANY ('{pending,in_flight}')
    ORDER BY p.seq
    LIMIT 1
$$;

GRANT EXECUTE ON FUNCTION
    outbox.tenant_turns_v1(bigint, timestamptz, text, boolean, integer, integer, integer),
    outbox.backlog_v1(bigint),
    outbox.tenant_backlog_v1(bigint, text, bigint),
    outbox.key_next_v1(bigint, text, text, bigint)
    TO PUBLIC;
