-- The application publishes (and reads back its own events, for
-- outbox.testing and idempotency keys), and records what it received
-- (outbox.receive). It writes only the columns publish() and receive write
-- (a delivery's state, attempts and error are the dispatcher's), and of the
-- endpoints it reads only what routing needs: never a secret, a URL or a
-- header, and it changes none.
GRANT USAGE ON SCHEMA outbox TO {role};
GRANT SELECT (id, name, events_like, max_pending, max_pending_per_tenant, enabled,
               removed_at, tenant, when_full)
    ON outbox.endpoints TO {role};
GRANT SELECT ON outbox.events TO {role};
GRANT INSERT (id, type, key, payload, headers, idempotency_key, created_at, deliver_after,
              unrouted, traceparent, tracestate, tenant) ON outbox.events TO {role};
GRANT INSERT (event_id, endpoint_id, seq, key, tenant, next_attempt_at)
    ON outbox.deliveries TO {role};
-- endpoint_id for what publish returns; tenant and state for
-- --max-pending-per-tenant's count.
GRANT SELECT (endpoint_id, tenant, state) ON outbox.deliveries TO {role};
GRANT SELECT, UPDATE (undelivered) ON outbox.endpoint_backlog TO {role};
GRANT SELECT ON outbox.schema_version TO {role};
GRANT SELECT ON outbox.inbox TO {role};
GRANT INSERT (consumer, event_id) ON outbox.inbox TO {role};
