-- Version 20: the endpoints' policies at work. The rule the dispatcher's
-- discard and a cold database's look share, whether an endpoint holds more
-- than its bounds (outbox.backlog_over_v1: --when-full drop-oldest), and the
-- dispatcher's right to say that a 410 Gone disabled an endpoint
-- (disabled_by = 'gone').
--
-- Locks: CREATE FUNCTION and GRANT lock no table. The previous release's
-- dispatchers and publishers keep working: their statements call no new
-- function and write no new column (its dispatchers leave disabled_by unset
-- after a 410, as before this version).

-- The backlog's policy (--when-full drop-oldest): whether an endpoint holds
-- more undelivered deliveries than max_pending (its counter, backlog_v1), or
-- one tenant more than per_tenant. A tenant's rows are counted only while the
-- whole holds more than per_tenant (no tenant can before): an index lookup of
-- 17 rows while the endpoint keeps within its bounds, one pass over its
-- undelivered rows while it holds more than a tenant may. Version 20; the
-- dispatcher's discard (discard_over) and a cold database's look
-- (database_due) read it.
CREATE OR REPLACE FUNCTION outbox.backlog_over_v1(endpoint_id bigint, max_pending bigint,
                                                  per_tenant bigint)
RETURNS TABLE (over boolean)
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT h.held OPERATOR(pg_catalog.>) max_pending
        OR (h.held OPERATOR(pg_catalog.>) per_tenant
            AND EXISTS (SELECT FROM (
                            SELECT d.tenant FROM outbox.deliveries d
                            WHERE d.endpoint_id OPERATOR(pg_catalog.=) backlog_over_v1.endpoint_id
                              AND d.state OPERATOR(pg_catalog.=) 'pending'
                              AND d.tenant IS NOT NULL
                            UNION ALL
                            SELECT d.tenant FROM outbox.deliveries d
                            WHERE d.endpoint_id OPERATOR(pg_catalog.=) backlog_over_v1.endpoint_id
                              AND d.state OPERATOR(pg_catalog.=) 'in_flight'
                              AND d.tenant IS NOT NULL) u
                        GROUP BY u.tenant
                        HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) per_tenant))
    FROM outbox.backlog_v1(backlog_over_v1.endpoint_id) h
$$;

GRANT EXECUTE ON FUNCTION outbox.backlog_over_v1(bigint, bigint, bigint) TO PUBLIC;

-- The roles an earlier `outbox grants` let pause an endpoint after a 410
-- (the dispatcher's) may now say so: disabled_by.
DO $grants$
DECLARE
    holder regrole;
BEGIN
    FOR holder IN SELECT DISTINCT a.grantee::regrole
                  FROM pg_catalog.pg_attribute att
                  CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
                  WHERE att.attrelid OPERATOR(pg_catalog.=) 'outbox.endpoints'::regclass
                    AND att.attname OPERATOR(pg_catalog.=) 'disabled_reason'::name
                    AND a.privilege_type OPERATOR(pg_catalog.=) 'UPDATE'::text
                    AND a.grantee OPERATOR(pg_catalog.<>) 0::oid
    LOOP
        EXECUTE pg_catalog.format('GRANT UPDATE (disabled_by) ON outbox.endpoints TO %s',
                                  holder);
    END LOOP;
END
$grants$;
