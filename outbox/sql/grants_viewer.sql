-- The viewer reads what `outbox web` shows (and `outbox status`, `dead list`,
-- `show` and `events list` print) and changes nothing: every delivery and
-- attempt, the events without their headers, the fleet's state, and of the
-- endpoints only what the pages show: never a secret, a URL or a header
-- value. Enough for the web view without --allow-actions (its actions need
-- the operator's role, as `outbox dead retry` does).
GRANT USAGE ON SCHEMA outbox TO {role};
GRANT SELECT (id, name, enabled, max_pending, disabled_reason, removed_at, events, tenant,
              max_attempts, timeout_seconds, min_backoff_seconds, max_backoff_seconds,
              max_in_flight, rate_limit, max_batch, format, breaker_failures,
              breaker_cooldown_seconds, breaker_window_seconds, breaker_rate,
              max_pending_per_tenant, send_tracestate, created_at, updated_at,
              description, when_full, keep_dead_seconds, trace_context, guarded, dropping,
              disabled_by)
    ON outbox.endpoints TO {role};
GRANT SELECT (id, type, key, payload, idempotency_key, created_at, unrouted, traceparent,
              tenant) ON outbox.events TO {role};
GRANT SELECT ON outbox.deliveries, outbox.attempts, outbox.endpoint_state, outbox.dispatchers,
    outbox.maintainer, outbox.schema_version, outbox.delivery_log TO {role};
