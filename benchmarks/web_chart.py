"""The endpoints page's read with many endpoints: the last hour's chart beside the counts.

    python benchmarks/web_chart.py [--endpoints 5000] [--hour 100000] [--pending 50000]
                                   [--retried 5000] [--older 300000] [--rounds 5]

One throwaway PostgreSQL, ``--endpoints`` live endpoints, and rows spread
evenly over them, written in bulk with SQL (then vacuumed and analysed):
``--older`` deliveries delivered three days ago, ``--hour`` delivered within
the last hour, ``--pending`` pending, ``--retried`` of those with three
failed attempts within the hour. Times, on one connection with the view's
settings (``jit`` off, ``work_mem`` 16 MB, a 5 s statement timeout), each
statement behind the endpoints page: the chart of every endpoint
(``web_minutes``), the counts (``admin_status``), the latest failures
(``web_last_failures``), the whole read the page's cache keeps, and one
endpoint's chart (its page). The figure is the median of ``--rounds``, the
statements taken in turn within each round (milliseconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

from outbox import admin
from outbox.migrate import migrate
from outbox.testing import TemporaryPostgres
from outbox.web.pages import read_overview
from outbox.web.why import last_failures, last_hour


def grow(dsn: str, endpoints: int, hour: int, pending: int, retried: int, older: int) -> float:
    """The endpoints and the rows; seconds."""
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute(
            "INSERT INTO outbox.endpoints (name, url, events, events_like) "
            "SELECT 'c' || i, 'http://127.0.0.1:9/c' || i, ARRAY['t.' || i], ARRAY['t.' || i] "
            "FROM generate_series(0, %s) AS i", (endpoints - 1,))
        for state, count, age in (("delivered", older, "3 days"), ("delivered", hour, "1 hour"),
                                  ("pending", pending, "2 hours")):
            conn.execute(
                "WITH ev AS (INSERT INTO outbox.events (id, type, payload, created_at, "
                "deliver_after) SELECT gen_random_uuid(), 't', '{}', now() - %(age)s::interval "
                "+ make_interval(secs => i %% 3600), now() FROM generate_series(1, %(n)s) AS i "
                "RETURNING id, seq, created_at) "
                "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, attempts, "
                "created_at, finished_at) "
                "SELECT id, (SELECT min(id) FROM outbox.endpoints) + seq %% %(endpoints)s, seq, "
                "%(state)s, CASE WHEN %(state)s = 'pending' THEN 0 ELSE 1 END, created_at, "
                "CASE WHEN %(state)s = 'delivered' THEN created_at + interval '2 seconds' END "
                "FROM ev", {"age": age, "n": count, "state": state, "endpoints": endpoints})
        conn.execute(
            "UPDATE outbox.deliveries SET attempts = 3 WHERE id IN (SELECT id FROM "
            "outbox.deliveries WHERE state = 'pending' ORDER BY id LIMIT %s)", (retried,))
        conn.execute(
            "INSERT INTO outbox.attempts (delivery_id, attempt, at, status, reason, error) "
            "SELECT id, n, now() - make_interval(secs => (id % 3000)::int + n), 500, "
            "'http_5xx', 'HTTP 500' FROM outbox.deliveries, generate_series(1, 3) AS n "
            "WHERE state = 'pending' AND attempts = 3")
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - start


def view_connection(dsn: str) -> psycopg.Connection[Any]:
    """A connection with the view's settings (outbox/web/db.py): no JIT, 16 MB to sort in,
    a 5 s statement timeout, nothing prepared."""
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None)
    conn.execute("SET jit = off")
    conn.execute("SET work_mem = '16MB'")
    conn.execute("SET statement_timeout = '5s'")
    return conn


def timed(reads: dict[str, Callable[[], Any]], rounds: int) -> None:
    """Each read ``rounds`` times, the reads in turn within a round; the medians printed
    (milliseconds, the range beside)."""
    times: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(rounds):
        for name, read in reads.items():
            started = time.perf_counter()
            read()
            times[name].append(1000 * (time.perf_counter() - started))
    for name, values in times.items():
        print(f"{name:48} {statistics.median(values):9.1f} ms "
              f"({min(values):.1f}-{max(values):.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=5000)
    parser.add_argument("--hour", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=50_000)
    parser.add_argument("--retried", type=int, default=5000)
    parser.add_argument("--older", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with TemporaryPostgres() as pg:
        took = grow(pg.dsn, args.endpoints, args.hour, args.pending, args.retried, args.older)
        print(f"{args.endpoints:,} endpoints; rows written and vacuumed in {took:.0f} s")
        with view_connection(pg.dsn) as conn:
            timed({
                "the chart of every endpoint (web_minutes)": lambda: last_hour(conn),
                "the counts (admin_status)": lambda: admin.status(conn),
                "the latest failures (web_last_failures)": lambda: last_failures(conn),
                "the page's whole read (cached)": lambda: read_overview(conn),
                "one endpoint's chart (its page)": lambda: last_hour(conn, "c7"),
            }, args.rounds)
            chart = last_hour(conn)
            print(f"the hour drawn: {chart.delivered:,} delivered, {chart.failed:,} failed "
                  f"attempts, {chart.pending_now:,} pending now")


if __name__ == "__main__":
    main()
