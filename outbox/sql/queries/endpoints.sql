-- name: endpoints_admin_lock
-- Endpoint changes are rare and made by people: one transaction-scoped
-- advisory lock serialises them (two syncs at once would otherwise both read
-- the old set and interleave their writes). Publish and the dispatcher only
-- read endpoints, so they never wait on it. The key is arbitrary but fixed.
-- Every change takes this lock, so this is also where running dispatchers are
-- told to reload their endpoints: the notification leaves only if the change
-- commits.
SELECT pg_advisory_xact_lock(7469813520412), pg_notify('outbox_endpoints', '');

-- name: endpoints_live
-- What shows an endpoint (list, get, update's merge) reads endpoints_shown:
-- every option but the secret and the header values, which it names only by
-- kind and by name. Only sync, the operator's, reads them (endpoints_full).
-- name: one endpoint (get, update), through endpoints_name_live (statements
-- run unprepared: a NULL filter folds away before planning). as_tenant is
-- the application's tenant guard (outbox.endpoints' as_tenant=): another
-- tenant's endpoint, and one of no tenant, is not found, exactly as an
-- unknown name is; NULL: no guard (the operator's command).
SELECT id, name, url, events, events_like, signing, signing_previous_until, header_names,
       max_attempts, timeout_seconds, min_backoff_seconds, max_backoff_seconds, max_in_flight,
       rate_limit, max_batch, format, breaker_failures, breaker_cooldown_seconds, max_pending,
       breaker_window_seconds, breaker_rate, max_pending_per_tenant, send_tracestate, ca_file,
       client_cert, client_key, tenant, description, when_full, keep_dead_seconds,
       trace_context,
       enabled, disabled_reason, created_at, updated_at, guarded, dropping, disabled_by
FROM outbox.endpoints_shown
WHERE removed_at IS NULL
  AND (%(name)s::text IS NULL OR name OPERATOR(pg_catalog.=) %(name)s::text)
  AND (%(tenant)s::text IS NULL OR tenant OPERATOR(pg_catalog.=) %(tenant)s::text)
  AND (%(as_tenant)s::text IS NULL OR tenant OPERATOR(pg_catalog.=) %(as_tenant)s::text)
ORDER BY name;

-- name: endpoints_full
-- Every live endpoint whole, its secret and header values included: what a
-- sync compares with its file (the operator's command; the file holds them).
SELECT id, name, url, events, events_like, secret, previous_secrets, max_attempts,
       timeout_seconds, min_backoff_seconds, max_backoff_seconds, max_in_flight, rate_limit,
       max_batch, format, headers, breaker_failures, breaker_cooldown_seconds, max_pending,
       breaker_window_seconds, breaker_rate, max_pending_per_tenant, send_tracestate, ca_file,
       client_cert, client_key, tenant, description, when_full, keep_dead_seconds,
       trace_context,
       enabled, disabled_reason, created_at, updated_at, guarded, dropping, disabled_by
FROM outbox.endpoints
WHERE removed_at IS NULL
ORDER BY name;

-- name: endpoint_id_by_name
-- FOR UPDATE: the row must not change under a removal, rotation or update in
-- progress (the dispatcher may be disabling it after a 410 at the same
-- moment). The tenant guard (as_tenant, see endpoints_live) is part of the
-- lookup, and the lock keeps it true until the transaction ends: a tenant
-- changed meanwhile is seen here (the lock reads the row's newest version)
-- or waits for this transaction. add looks names up without it: a name is
-- taken whoever's endpoint holds it.
SELECT id FROM outbox.endpoints
WHERE name = %(name)s AND removed_at IS NULL
  AND (%(as_tenant)s::text IS NULL OR tenant OPERATOR(pg_catalog.=) %(as_tenant)s::text)
FOR UPDATE;

-- name: endpoint_insert
INSERT INTO outbox.endpoints
    (name, url, events, events_like, secret, max_attempts, timeout_seconds,
     min_backoff_seconds, max_backoff_seconds, max_in_flight, rate_limit, max_batch,
     format, headers, breaker_failures, breaker_cooldown_seconds, max_pending,
     breaker_window_seconds, breaker_rate, max_pending_per_tenant, send_tracestate, ca_file,
     client_cert, client_key, tenant, description, when_full, keep_dead_seconds, trace_context,
     guarded)
VALUES
    (%(name)s, %(url)s, %(events)s::text[], %(events_like)s::text[], %(secret)s::text,
     %(max_attempts)s, %(timeout_seconds)s, %(min_backoff_seconds)s,
     %(max_backoff_seconds)s, %(max_in_flight)s, %(rate_limit)s::float8, %(max_batch)s,
     %(format)s, %(headers)s::jsonb, %(breaker_failures)s, %(breaker_cooldown_seconds)s,
     %(max_pending)s::bigint, %(breaker_window_seconds)s, %(breaker_rate)s,
     %(max_pending_per_tenant)s::bigint,
     %(send_tracestate)s::boolean, %(ca_file)s::text, %(client_cert)s::text,
     %(client_key)s::text, %(tenant)s::text, %(description)s::text, %(when_full)s::text,
     %(keep_dead_seconds)s::float8, %(trace_context)s::boolean, %(guarded)s::boolean)
RETURNING id;

-- name: endpoint_update
-- Every option but the secret and the headers, which it neither reads nor
-- writes: an update (outbox.endpoints.update, `endpoints update`) sets them
-- only when given (endpoint_set_secret, endpoint_set_headers), so that
-- changing a URL needs no right to read a secret; a sync sets the headers
-- always and the secret when it differs from the stored one, so that an
-- option left out of the file returns to its default and an unchanged
-- secret keeps its rotation. enabled, disabled_reason and disabled_by are
-- not options: an operator's disable (or a 410's) survives a sync.
UPDATE outbox.endpoints SET
    url = %(url)s,
    events = %(events)s::text[],
    events_like = %(events_like)s::text[],
    max_attempts = %(max_attempts)s,
    timeout_seconds = %(timeout_seconds)s,
    min_backoff_seconds = %(min_backoff_seconds)s,
    max_backoff_seconds = %(max_backoff_seconds)s,
    max_in_flight = %(max_in_flight)s,
    rate_limit = %(rate_limit)s::float8,
    max_batch = %(max_batch)s,
    format = %(format)s,
    breaker_failures = %(breaker_failures)s,
    breaker_cooldown_seconds = %(breaker_cooldown_seconds)s,
    breaker_window_seconds = %(breaker_window_seconds)s,
    breaker_rate = %(breaker_rate)s,
    max_pending = %(max_pending)s::bigint,
    max_pending_per_tenant = %(max_pending_per_tenant)s::bigint,
    send_tracestate = %(send_tracestate)s::boolean,
    ca_file = %(ca_file)s::text,
    client_cert = %(client_cert)s::text,
    client_key = %(client_key)s::text,
    tenant = %(tenant)s::text,
    description = %(description)s::text,
    when_full = %(when_full)s::text,
    keep_dead_seconds = %(keep_dead_seconds)s::float8,
    trace_context = %(trace_context)s::boolean,
    -- Sticky: saved once with its URL checked (check_url=True), it stays guarded.
    guarded = guarded OR %(guarded)s::boolean,
    updated_at = now()
WHERE id = %(id)s;

-- name: endpoint_set_secret
-- A new secret given to update: it replaces the old one at once (a rotation
-- keeps both: endpoint_rotate_secret), and the old rotation's secrets go.
UPDATE outbox.endpoints
SET secret = %(secret)s::text, previous_secrets = '[]'::jsonb, updated_at = now()
WHERE id = %(id)s;

-- name: endpoint_set_headers
UPDATE outbox.endpoints SET headers = %(headers)s::jsonb, updated_at = now()
WHERE id = %(id)s;

-- name: endpoint_set_enabled
-- Enabling clears the reason it was disabled, who disabled it and dropping,
-- and wakes the dispatchers, so that the deliveries that waited resume at
-- once rather than at the next poll. Disabling says who (by: 'operator' from
-- the command, 'application' from outbox.endpoints) and whether what is made
-- for the endpoint is discarded meanwhile (drop; a plain disable is a pause
-- that keeps everything, also after a disable --drop).
WITH changed AS (
    UPDATE outbox.endpoints
    SET enabled = %(enabled)s, disabled_reason = %(reason)s::text,
        disabled_by = %(by)s::text, dropping = %(drop)s::boolean, updated_at = now()
    WHERE name = %(name)s AND removed_at IS NULL
    AND (%(as_tenant)s::text IS NULL OR tenant OPERATOR(pg_catalog.=) %(as_tenant)s::text)
    RETURNING id, enabled
)
SELECT id, (SELECT pg_notify('outbox_wakeup', '') WHERE changed.enabled) AS woke
FROM changed;

-- name: endpoint_discard_pending
-- "Stop sending" (disable --drop), in the caller's transaction: the pending
-- deliveries of the named endpoint, while it is dropping, are discarded at
-- once, and leave the --max-pending count; run again by enable before it
-- clears dropping, so that nothing made while the endpoint dropped goes out
-- after it. Returns how many. A function of the schema
-- (discard_endpoint_pending, schema.sql has its why), which the endpoint
-- manager, which may not update deliveries, calls too.
SELECT outbox.discard_endpoint_pending(%(name)s::text, %(as_tenant)s::text) AS discarded;

-- name: endpoint_undelivered
-- Written as an OR of equalities rather than IN (...): the planner can then
-- answer each arm from its partial index (deliveries_pending and
-- deliveries_in_flight) and combine them with a BitmapOr.
SELECT endpoint_id, count(*)
FROM outbox.deliveries
WHERE endpoint_id = ANY (%(ids)s::bigint[])
  AND (state = 'pending' OR state = 'in_flight')
GROUP BY endpoint_id;

-- name: endpoint_dead_letter_all
-- A forced removal: every undelivered delivery becomes a dead letter saying
-- why, its lease cleared (a dispatcher still holding one cannot record a
-- result over it). A function of the schema (bury_endpoint_deliveries), which
-- the endpoint manager, which may not finish a delivery, calls too.
SELECT outbox.bury_endpoint_deliveries(%(id)s::bigint, %(reason)s::text) AS buried;

-- name: endpoint_mark_removed
-- Soft delete: the row stays so that every endpoint_id of old deliveries
-- resolves; the name becomes free for a new endpoint (the unique index
-- covers live rows only).
UPDATE outbox.endpoints
SET removed_at = now(), updated_at = now()
WHERE id = %(id)s;

-- name: endpoint_rotate_secret
-- The retired secret goes first (newest first, the order the dispatcher signs
-- in), then earlier ones still inside their overlap; expired entries, and any
-- equal to the new secret, are pruned. A zero overlap keeps nothing. A
-- function of the schema (rotate_endpoint_secret) does it, with its owner's
-- rights: the endpoint manager, which may not read the secret it retires,
-- rotates through it too; for a caller other than the owner it refuses an
-- env: secret, and for an endpoint manager an endpoint without a tenant;
-- as_tenant (the application's tenant guard) finds only that tenant's.
SELECT r.id, r.old_signs_until, r.retired_until
FROM outbox.rotate_endpoint_secret(%(name)s::text, %(secret)s::text, %(overlap)s::float8,
                                   %(as_tenant)s::text) AS r;

-- name: endpoint_retry_target
-- The endpoint `retry-now` acts on, locked as a removal or rotation locks it
-- (FOR UPDATE: the viewer role, which may not write, is refused here).
SELECT id, enabled FROM outbox.endpoints
WHERE name = %(name)s AND removed_at IS NULL
  AND (%(as_tenant)s::text IS NULL OR tenant OPERATOR(pg_catalog.=) %(as_tenant)s::text)
FOR UPDATE;

-- name: endpoint_retry_count
-- What `retry-now --dry-run` would make due, as endpoint_retry_now counts,
-- and whether it would put the circuit half-open; read only.
SELECT e.id, e.enabled,
       (SELECT count(*) FROM outbox.deliveries d
        WHERE d.endpoint_id OPERATOR(pg_catalog.=) e.id AND d.state = 'pending'
          AND NOT e.dropping
          AND d.next_attempt_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
          AND d.next_attempt_at OPERATOR(pg_catalog.<>) 'infinity'::timestamptz
          AND (%(tenant)s::text IS NULL
               OR d.tenant OPERATOR(pg_catalog.=) %(tenant)s::text)) AS due,
       EXISTS (SELECT 1 FROM outbox.endpoint_state s
               WHERE s.endpoint_id OPERATOR(pg_catalog.=) e.id
                 AND s.circuit = 'open' AND NOT e.dropping) AS half_open
FROM outbox.endpoints e
WHERE e.name = %(name)s AND e.removed_at IS NULL
  AND (%(as_tenant)s::text IS NULL OR e.tenant OPERATOR(pg_catalog.=) %(as_tenant)s::text);

-- name: endpoint_retry_now
-- `retry-now`: the endpoint's pending deliveries waiting for a later attempt
-- (a backoff, a Retry-After) become due now, and an open circuit goes
-- half-open with its probe lease already over, so that the next request is
-- the probe; rows parked behind their key stay parked; nothing changes at an
-- endpoint disabled with --drop. The statement is a function of the schema
-- (retry_endpoint_now, schema.sql has its why), which the endpoint manager,
-- which may not update deliveries, calls too.
SELECT r.due, r.half_open
FROM outbox.retry_endpoint_now(%(id)s::bigint, %(tenant)s::text) AS r;

