-- Version 8: tenants. An event's tenant (events.tenant, copied to each of its
-- deliveries, where key order and an endpoint's per-tenant bound look for
-- it), and --max-pending-per-tenant (endpoints.max_pending_per_tenant).
-- NULL is "no tenant": events of the previous release's publishers, and of
-- this release's without tenant=, which are sent exactly as before.
--
-- The roles that publish (those that may insert an event's type and a
-- delivery's key, column by column as `outbox grants` gives them) may
-- insert the tenant too, and read what the per-tenant bound reads, so that
-- an upgraded database goes on working with the grants an earlier release
-- applied; `outbox grants` of this release gives the same.
--
-- Locks: ADD COLUMN of a nullable column without a default only changes the
-- catalogue (no rewrite, no scan), but takes each table's ACCESS EXCLUSIVE
-- lock for that moment: publish() waits for it for milliseconds, and the
-- migrator's lock_timeout keeps it from queueing behind a long transaction.
-- The CHECK of the endpoints' new column scans that table (a few rows). The
-- previous release's statements name their columns and never see these.

-- The tables in the order a publisher's statement locks them (endpoints,
-- read to route the events, before it writes events and deliveries): a
-- publisher already past endpoints holds nothing this step waits for but
-- that, and one not yet there waits holding nothing. In another order the
-- step could hold events while a publisher holding endpoints waits for
-- events: a deadlock, cut only by the lock_timeout (and every try of it
-- holding the publishers back meanwhile).
ALTER TABLE outbox.endpoints ADD COLUMN IF NOT EXISTS max_pending_per_tenant bigint
    CHECK (max_pending_per_tenant > 0);
ALTER TABLE outbox.events ADD COLUMN IF NOT EXISTS tenant text;
ALTER TABLE outbox.deliveries ADD COLUMN IF NOT EXISTS tenant text;

DO $grants$
DECLARE
    extend record;
    holder regrole;
BEGIN
    FOR extend IN SELECT * FROM (VALUES
            ('outbox.events'::regclass, 'type', 'INSERT', 'INSERT (tenant)'),
            ('outbox.deliveries'::regclass, 'key', 'INSERT', 'INSERT (tenant)'),
            ('outbox.deliveries'::regclass, 'endpoint_id', 'SELECT', 'SELECT (tenant, state)'),
            ('outbox.endpoints'::regclass, 'max_pending', 'SELECT',
             'SELECT (max_pending_per_tenant)')) AS x(relation, attname, held, granted)
    LOOP
        FOR holder IN SELECT DISTINCT a.grantee::regrole
                      FROM pg_catalog.pg_attribute att
                      CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
                      WHERE att.attrelid = extend.relation AND att.attname = extend.attname
                        AND a.privilege_type = extend.held AND a.grantee <> 0
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', extend.granted,
                                      extend.relation, holder);
        END LOOP;
    END LOOP;
END
$grants$;
