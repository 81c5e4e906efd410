-- Version 12: an endpoint's own TLS files, read by the dispatcher on its
-- filesystem: the CA bundle its certificate is checked against (ca_file,
-- NULL: the default bundle), and the client certificate and key it is
-- shown (client_cert, client_key, given together; NULL: none).
--
-- Locks: ADD COLUMN of a nullable column without a default only changes the
-- catalogue (no rewrite, no scan), but takes the endpoints table's ACCESS
-- EXCLUSIVE lock for that moment: publish() waits for it for milliseconds,
-- and the migrator's lock_timeout keeps it from queueing behind a long
-- transaction. The CHECK scans that table (a few rows). The previous
-- release's statements name their columns and never see these; its
-- dispatchers reach such an endpoint without its files (their attempts
-- fail and are retried) until they are replaced. The dispatcher's role
-- reads the whole table (grants.sql), these columns included; the
-- publishers' roles read only the routing columns and need none of them.

ALTER TABLE outbox.endpoints
    ADD COLUMN IF NOT EXISTS ca_file text,
    ADD COLUMN IF NOT EXISTS client_cert text,
    ADD COLUMN IF NOT EXISTS client_key text;

ALTER TABLE outbox.endpoints DROP CONSTRAINT IF EXISTS endpoints_client_identity;
ALTER TABLE outbox.endpoints ADD CONSTRAINT endpoints_client_identity
    CHECK ((client_cert IS NULL) = (client_key IS NULL));
