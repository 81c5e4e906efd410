-- Version 18: endpoints that customers own, whole.
--
-- * description: the customer's own label for the endpoint (free text, up
--   to 200 characters), shown by `list --json` and the portal.
-- * when_full: what a full backlog (--max-pending, --max-pending-per-tenant)
--   does: 'refuse' (BacklogFull in publish(), as before) or 'drop-oldest'
--   (publish() never refuses for it; the dispatcher discards the oldest
--   pending deliveries past the bound).
-- * keep_dead_seconds: dead letters older than this are discarded by the
--   retention (NULL: kept until retried or discarded, as before).
-- * trace_context: false sends neither traceparent nor tracestate.
-- * guarded: saved with its URL checked (check_url=True): the dispatcher
--   applies the private-network guard to it at connect time, whatever its
--   own flags.
-- * dropping: disabled with `disable --drop`: its undelivered deliveries,
--   and every delivery made for it while it stays so, are discarded.
-- * disabled_by: who disabled it: 'operator' (the command line), 'application'
--   (outbox.endpoints.disable) or 'gone' (a 410); NULL while enabled.
-- * A delivery may be 'discarded' (by the endpoint's policy), a finished
--   state like delivered and dead, kept until retention removes it.
--
-- Locks: ADD COLUMN of a column whose default is a constant changes only the
-- catalogue (no rewrite), under the endpoints' ACCESS EXCLUSIVE lock for a
-- moment and the migrator's lock_timeout; the CHECKs scan the endpoints, a
-- table of a few rows. The deliveries' state CHECK is replaced NOT VALID
-- (the table's ACCESS EXCLUSIVE lock for a moment, no scan); version 19
-- validates it without blocking a publisher. Every operator and function is
-- named whole: nothing here resolves through the migrating session's path.
-- The previous release's publishers and dispatchers name their columns and
-- never see the new ones; they write no 'discarded' row.
ALTER TABLE outbox.endpoints
    ADD COLUMN IF NOT EXISTS description text
        CONSTRAINT endpoints_description_length
        CHECK (pg_catalog.char_length(description) OPERATOR(pg_catalog.<=) 200),
    ADD COLUMN IF NOT EXISTS when_full text NOT NULL DEFAULT 'refuse'
        CONSTRAINT endpoints_when_full
        CHECK (when_full OPERATOR(pg_catalog.=) 'refuse'::text
               OR when_full OPERATOR(pg_catalog.=) 'drop-oldest'::text),
    ADD COLUMN IF NOT EXISTS keep_dead_seconds double precision
        CONSTRAINT endpoints_keep_dead
        CHECK (keep_dead_seconds OPERATOR(pg_catalog.>) 0::double precision),
    ADD COLUMN IF NOT EXISTS trace_context boolean NOT NULL DEFAULT true,
    ADD COLUMN IF NOT EXISTS guarded boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS dropping boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS disabled_by text
        CONSTRAINT endpoints_disabled_by
        CHECK (disabled_by OPERATOR(pg_catalog.=) 'operator'::text
               OR disabled_by OPERATOR(pg_catalog.=) 'application'::text
               OR disabled_by OPERATOR(pg_catalog.=) 'gone'::text);

-- Endpoints disabled before this version, by whom their reason names: a 410,
-- the application's outbox.endpoints.disable, or else an operator.
UPDATE outbox.endpoints
SET disabled_by = CASE
        WHEN disabled_reason OPERATOR(pg_catalog.~~) '410 Gone%'::text THEN 'gone'
        WHEN disabled_reason OPERATOR(pg_catalog.~~) 'disabled by the application%'::text
            THEN 'application'
        ELSE 'operator' END
WHERE NOT enabled AND disabled_by IS NULL;

ALTER TABLE outbox.deliveries
    DROP CONSTRAINT IF EXISTS deliveries_state_check,
    ADD CONSTRAINT deliveries_state_check
        CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['pending'::text, 'in_flight'::text,
               'delivered'::text, 'dead'::text, 'discarded'::text])) NOT VALID;

-- The delivery log, for the application's own pages: one row per delivery
-- (newest by id), joined with its endpoint's name and its event's type. No
-- payload, no secret: what the endpoint manager and the viewer may read.
CREATE OR REPLACE VIEW outbox.delivery_log AS
SELECT d.event_id, e.name AS endpoint, d.tenant, ev.type, d.key, d.state,
       d.attempts_before OPERATOR(pg_catalog.+) d.attempts AS attempts, d.created_at,
       CASE WHEN d.state OPERATOR(pg_catalog.=) 'pending'::text
                 AND d.next_attempt_at OPERATOR(pg_catalog.<) 'infinity'::timestamptz
            THEN d.next_attempt_at END AS next_attempt_at,
       CASE WHEN d.state OPERATOR(pg_catalog.=) 'delivered'::text
            THEN d.finished_at END AS delivered_at,
       d.last_status, d.last_error
FROM outbox.deliveries d
JOIN outbox.endpoints e ON e.id OPERATOR(pg_catalog.=) d.endpoint_id
JOIN outbox.events ev ON ev.id OPERATOR(pg_catalog.=) d.event_id;

-- The endpoints as `list --json`, outbox.endpoints.get and .list show them:
-- every column but the secrets and the header values, with the secret's kind
-- ('whsec', or the env:NAME it names), until when a rotated secret still
-- signs, and the header names. It runs with its owner's rights, so that a role
-- that may not read a secret or a header value (the endpoint manager) reads
-- the endpoints through it; no statement that shows an endpoint needs a
-- secret (version 18).
CREATE OR REPLACE VIEW outbox.endpoints_shown AS
SELECT e.id, e.name, e.url, e.events, e.events_like,
       CASE WHEN e.secret OPERATOR(pg_catalog.~~) 'env:%'::text THEN e.secret
            WHEN e.secret IS NOT NULL THEN 'whsec'::text END AS signing,
       (SELECT pg_catalog.max((p.entry OPERATOR(pg_catalog.->>) 'expires_at'::text)
                              ::timestamptz)
        FROM pg_catalog.jsonb_array_elements(e.previous_secrets) AS p(entry)
       ) AS signing_previous_until,
       ARRAY(SELECT pg_catalog.jsonb_object_keys(e.headers)) AS header_names,
       e.max_attempts, e.timeout_seconds, e.min_backoff_seconds, e.max_backoff_seconds,
       e.max_in_flight, e.rate_limit, e.max_batch, e.format, e.breaker_failures,
       e.breaker_cooldown_seconds, e.max_pending, e.enabled, e.disabled_reason, e.created_at,
       e.updated_at, e.removed_at, e.send_tracestate, e.max_pending_per_tenant, e.ca_file,
       e.client_cert, e.client_key, e.breaker_window_seconds, e.breaker_rate, e.tenant,
       e.description, e.when_full, e.keep_dead_seconds, e.trace_context, e.guarded,
       e.dropping, e.disabled_by
FROM outbox.endpoints e;

-- Roles granted by an earlier release go on working: the ones that read an
-- endpoint's routing columns (publish()) may read when_full, which publish()
-- now reads, and those that read its options (the viewer) the new ones.
DO $grants$
DECLARE
    holder regrole;
BEGIN
    FOR holder IN SELECT DISTINCT a.grantee::regrole
                  FROM pg_catalog.pg_attribute att
                  CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
                  WHERE att.attrelid OPERATOR(pg_catalog.=) 'outbox.endpoints'::regclass
                    AND att.attname OPERATOR(pg_catalog.=) 'events_like'::name
                    AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT'::text
                    AND a.grantee OPERATOR(pg_catalog.<>) 0::oid
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT (when_full) ON outbox.endpoints TO %s',
                                  holder);
    END LOOP;
    FOR holder IN SELECT DISTINCT a.grantee::regrole
                  FROM pg_catalog.pg_attribute att
                  CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
                  WHERE att.attrelid OPERATOR(pg_catalog.=) 'outbox.endpoints'::regclass
                    AND att.attname OPERATOR(pg_catalog.=) 'max_attempts'::name
                    AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT'::text
                    AND a.grantee OPERATOR(pg_catalog.<>) 0::oid
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT SELECT (description, when_full, keep_dead_seconds, trace_context, guarded, '
            'dropping, disabled_by) ON outbox.endpoints TO %s', holder);
    END LOOP;
END
$grants$;
