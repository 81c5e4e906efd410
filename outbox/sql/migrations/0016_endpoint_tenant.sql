-- Version 16: an endpoint that belongs to a tenant (--tenant, TOML tenant).
-- publish() routes an event to the endpoints whose patterns match its type
-- and that have no tenant or the event's; the dispatcher dead-letters a
-- delivery of another tenant's event to a tenant's endpoint, whoever made it.
-- NULL is "no tenant": every endpoint of an earlier version, which receives
-- the matching events of every tenant, as before. 1 to 200 printable ASCII
-- characters, as publish() checks of an event's tenant.
--
-- The roles that publish (those that may read an endpoint's routing columns,
-- as `outbox grants` gives them) may read its tenant too, so that an upgraded
-- database goes on working with the grants an earlier release applied.
--
-- Locks: ADD COLUMN of a nullable column without a default only changes the
-- catalogue (no rewrite), under the endpoints' ACCESS EXCLUSIVE lock for a
-- moment and the migrator's lock_timeout; its CHECK scans the endpoints, a
-- table of a few rows whose every row holds NULL there. The previous
-- release's publishers and dispatchers name their columns and never see it.
ALTER TABLE outbox.endpoints ADD COLUMN IF NOT EXISTS tenant text
    CONSTRAINT endpoints_tenant_printable CHECK (tenant ~ '^[ -~]{1,200}$');

-- publish's routing: the live endpoints without a tenant, and those of the
-- tenants of a batch (`endpoints list --tenant` too). CREATE INDEX on the
-- endpoints (a few rows; publishers only read them) waits for no publisher.
CREATE INDEX IF NOT EXISTS endpoints_tenant
    ON outbox.endpoints (tenant) WHERE removed_at IS NULL;

DO $grants$
DECLARE
    holder regrole;
BEGIN
    FOR holder IN SELECT DISTINCT a.grantee::regrole
                  FROM pg_catalog.pg_attribute att
                  CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
                  WHERE att.attrelid = 'outbox.endpoints'::regclass
                    AND att.attname = 'events_like'
                    AND a.privilege_type = 'SELECT' AND a.grantee <> 0
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT (tenant) ON outbox.endpoints TO %s', holder);
    END LOOP;
END
$grants$;
