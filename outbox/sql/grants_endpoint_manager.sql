-- The endpoint manager runs outbox.endpoints for the application (the
-- customers' pages, the portal): it reads the endpoints through
-- endpoints_shown (every column but the secrets and the header values) and
-- their deliveries, attempts and events without payloads or headers; it
-- writes the endpoints' options (a secret and headers too, which it can
-- never read back), under the guard of the endpoints' trigger (no env:
-- secret, no endpoint without a tenant); it publishes a test event as the
-- application does, and replays (new pending deliveries, the event no longer
-- unrouted); it changes deliveries' states and rotates secrets only through
-- the functions below, which keep the same rules. It cannot move a
-- delivery to delivered or dead by SQL, nor write an attempt.
GRANT USAGE ON SCHEMA outbox TO {role};
GRANT SELECT ON outbox.schema_version, outbox.endpoints_shown, outbox.delivery_log,
    outbox.deliveries, outbox.attempts, outbox.endpoint_state TO {role};
GRANT SELECT (id, name, url, events, events_like, max_attempts, timeout_seconds,
              min_backoff_seconds, max_backoff_seconds, max_in_flight, rate_limit, max_batch,
              format, breaker_failures, breaker_cooldown_seconds, max_pending, enabled,
              disabled_reason, created_at, updated_at, removed_at, send_tracestate,
              max_pending_per_tenant, ca_file, client_cert, client_key,
              breaker_window_seconds, breaker_rate, tenant, description, when_full,
              keep_dead_seconds, trace_context, guarded, dropping, disabled_by)
    ON outbox.endpoints TO {role};
GRANT INSERT (name, url, events, events_like, secret, max_attempts, timeout_seconds,
              min_backoff_seconds, max_backoff_seconds, max_in_flight, rate_limit, max_batch,
              format, headers, breaker_failures, breaker_cooldown_seconds, max_pending,
              send_tracestate, max_pending_per_tenant, ca_file, client_cert, client_key,
              breaker_window_seconds, breaker_rate, tenant, description, when_full,
              keep_dead_seconds, trace_context, guarded)
    ON outbox.endpoints TO {role};
GRANT UPDATE (url, events, events_like, secret, previous_secrets, max_attempts,
              timeout_seconds, min_backoff_seconds, max_backoff_seconds, max_in_flight,
              rate_limit, max_batch, format, headers, breaker_failures,
              breaker_cooldown_seconds, max_pending, enabled, disabled_reason, updated_at,
              removed_at, send_tracestate, max_pending_per_tenant, ca_file, client_cert,
              client_key, breaker_window_seconds, breaker_rate, tenant, description,
              when_full, keep_dead_seconds, trace_context, guarded, dropping, disabled_by)
    ON outbox.endpoints TO {role};
GRANT SELECT (id, seq, type, key, idempotency_key, created_at, deliver_after, unrouted,
              traceparent, tenant) ON outbox.events TO {role};
GRANT INSERT (id, type, key, payload, headers, idempotency_key, created_at, deliver_after,
              unrouted, traceparent, tracestate, tenant) ON outbox.events TO {role};
GRANT INSERT (event_id, endpoint_id, seq, key, tenant, next_attempt_at, attempts_before)
    ON outbox.deliveries TO {role};
GRANT UPDATE (unrouted) ON outbox.events TO {role};
GRANT SELECT, UPDATE (undelivered) ON outbox.endpoint_backlog TO {role};
GRANT EXECUTE ON FUNCTION
    outbox.rotate_endpoint_secret(text, text, double precision, text),
    outbox.retry_endpoint_now(bigint, text),
    outbox.bury_endpoint_deliveries(bigint, text),
    outbox.discard_endpoint_pending(text, text),
    outbox.retry_dead_deliveries(bigint, uuid[], text[], timestamptz, timestamptz, text, boolean)
    TO {role};
