-- Queries of `outbox demo` (outbox/demo/), run only on its throwaway cluster.

-- name: demo_orders_table
-- The demo's business table: every order is inserted in the same transaction
-- as its order.created event, so a rolled-back order leaves neither behind.
CREATE TABLE IF NOT EXISTS public.demo_orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer    text NOT NULL,
    amount      numeric(10, 2) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- name: demo_order_insert
INSERT INTO public.demo_orders (customer, amount)
VALUES (%(customer)s, %(amount)s)
RETURNING id;

-- name: demo_order_count
SELECT count(*) FROM public.demo_orders;

-- name: demo_dead_count
-- Polled while the demo runs; reads the deliveries_finished partial index.
SELECT count(*) FROM outbox.deliveries WHERE state = 'dead';

-- name: demo_shipments_table
-- The receiving service's business table: one shipment per order it took.
-- No unique key on purpose: only first_time keeps a duplicate delivery from
-- shipping twice, and the summary counts the rows to show it did.
CREATE TABLE IF NOT EXISTS public.demo_shipments (
    order_id    bigint NOT NULL,
    event_id    text NOT NULL,
    shipped_at  timestamptz NOT NULL DEFAULT now()
);

-- name: demo_shipment_insert
INSERT INTO public.demo_shipments (order_id, event_id) VALUES (%(order_id)s, %(event_id)s);

-- name: demo_shipment_count
SELECT count(*) FROM public.demo_shipments;

-- name: demo_watch
-- Polled while the demo runs, twice a second: the demo endpoint's circuit, when
-- it last opened, the failures its breaker window holds, the seconds until its
-- probe may go, and the seconds until the next retry is due (NULL: none
-- waits). The retry reads the pending-deliveries index by due time.
SELECT s.circuit, s.opened_at,
       outbox.circuit_sum_v2(s.window_failures),
       extract(epoch FROM s.opened_at + make_interval(secs => e.breaker_cooldown_seconds)
                         - now())::float8,
       e.breaker_cooldown_seconds,
       (SELECT extract(epoch FROM min(d.next_attempt_at) - now())::float8
        FROM outbox.deliveries d
        WHERE d.state = 'pending' AND d.next_attempt_at <> 'infinity')
FROM outbox.endpoint_state s
JOIN outbox.endpoints e ON e.id = s.endpoint_id
WHERE e.name = 'demo-receiver' AND e.removed_at IS NULL;
