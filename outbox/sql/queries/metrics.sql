-- name: backlog
-- The gauges of the fleet's shared state, measured at scrape time: per live
-- endpoint, whether its circuit is open (or half-open), and how many
-- deliveries wait (state 'pending') and how old, on the database clock, the
-- oldest of them is (counted from when the delivery was created, so a
-- delayed event's delay counts too). Disabled endpoints are included: their
-- deliveries wait, and that is worth seeing.
-- Why LATERAL: the sub-select runs once per endpoint with a fixed endpoint_id
-- and state = 'pending', which matches the partial index deliveries_pending,
-- so it reads only that endpoint's waiting rows, never the delivered and dead
-- history that makes up most of the table. An endpoint with nothing pending
-- still gets its row (count 0, age 0) so that its series stays continuous.
SELECT e.name,
       p.pending,
       greatest(coalesce(extract(epoch FROM clock_timestamp() - p.oldest), 0), 0)::float8
           AS oldest_seconds,
       coalesce(s.circuit, 'closed') AS circuit,
       e.max_pending
FROM outbox.endpoints AS e
LEFT JOIN outbox.endpoint_state AS s ON s.endpoint_id = e.id
CROSS JOIN LATERAL (
    SELECT count(*) AS pending, min(d.created_at) AS oldest
    FROM outbox.deliveries AS d
    WHERE d.endpoint_id = e.id AND d.state = 'pending'
) AS p
WHERE e.removed_at IS NULL
ORDER BY e.name;
