
-- {role}: {kinds}.
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM {role};
{parts}
INSERT INTO outbox.grantees (role, kind)
SELECT {role_name}, k.kind FROM pg_catalog.unnest(ARRAY[{kind_names}]::text[]) AS k(kind)
ON CONFLICT DO NOTHING;
