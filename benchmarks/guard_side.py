"""One measurement of one tree, for the release guard (``guard.py``); prints one JSON line.

    REF_VENV/bin/python benchmarks/guard_side.py drain --dsn DSN --url URL [--events N]
                                                 [--max-batch N] [--dispatchers N]
                                                 [--tenants N]
    REF_VENV/bin/python benchmarks/guard_side.py idle --dsn DSN --url URL [--samples N]

Run by the Python of the tree under test (its own virtual environment), from
that tree's folder, so that ``outbox`` (schema, ``publish``) and ``python -m
dispatcher`` are that tree's, while this driver is the same file for both
trees. DSN is an empty database: this tree's ``migrate`` makes the schema and
one endpoint pointing at URL, the guard's receiver, which answers ``GET
/stats`` and ``GET /reset`` (``throughput.Arrivals``).

``drain`` is ``fleet.py``'s race: the backlog waits for a paused endpoint
while the dispatchers start and become ready; enabling it starts them;
reported are the receiver's first and last arrival and the dispatchers' CPU
(user + system, from /proc) from the start signal to the last arrival.
``--tenants N`` spreads the backlog over N tenants in turn (trees that have
tenants only).
``idle`` publishes one event per transaction to a running, idle dispatcher
and reports each commit-to-arrival time (the receiver's last arrival, on the
same monotonic clock).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

import outbox
from outbox.migrate import migrate

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet  # the dispatcher's start, readiness and CPU readings, shared with fleet.py


class Stats:
    """The guard's receiver, over one kept-alive connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)

    def get(self, path: str) -> dict[str, Any]:
        self.conn.request("GET", path)
        answer: dict[str, Any] = json.loads(self.conn.getresponse().read())
        return answer


def prepare(dsn: str, url: str, *, max_batch: int, max_in_flight: int, enabled: bool) -> None:
    """This tree's schema and the one endpoint."""
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        conn.execute("INSERT INTO outbox.endpoints (name, url, events, events_like, max_batch, "
                     "max_in_flight, enabled) VALUES ('bench', %s, '{*}', '{%%}', %s, %s, %s)",
                     (url, max_batch, max_in_flight, enabled))
        conn.commit()


def event(n: int, tenants: int) -> outbox.Event:
    """The backlog's n-th event: of one of ``tenants`` tenants in turn (0: none, as any tree
    can publish)."""
    if not tenants:
        return outbox.Event("bench.event", {"n": n})
    return outbox.Event("bench.event", {"n": n}, tenant=f"t{n % tenants:05d}")


def drain(args: argparse.Namespace) -> dict[str, Any]:
    prepare(args.dsn, args.url, max_batch=args.max_batch, max_in_flight=args.max_in_flight,
            enabled=False)
    with psycopg.connect(args.dsn) as conn:
        for first in range(0, args.events, 5000):
            outbox.publish_many(conn, [event(i, args.tenants)
                                       for i in range(first, min(args.events, first + 5000))])
            conn.commit()
    stats = Stats(args.url)
    started = [fleet.start(args.dsn) for _ in range(args.dispatchers)]
    procs = [proc for proc, _ in started]
    try:
        fleet.ready(started)
        stats.get("/reset")
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            before = fleet.committed(conn)
            cpu_before = sum(fleet.cpu_seconds(p.pid) for p in procs)
            conn.execute("UPDATE outbox.endpoints SET enabled = true WHERE name = 'bench'")
            conn.execute("SELECT pg_notify('outbox_endpoints', ''), "
                         "pg_notify('outbox_wakeup', '')")
        deadline = time.monotonic() + 600
        while (seen := stats.get("/stats"))["events"] < args.events:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{args.dispatchers} dispatchers delivered {seen['events']} "
                                   f"of {args.events}")
            time.sleep(0.01)
        cpu = sum(fleet.cpu_seconds(p.pid) for p in procs) - cpu_before
    finally:
        fleet.stop(procs)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        time.sleep(0.5)  # backends report their statistics as they exit
        statements = fleet.committed(conn) - before
    return {"events": seen["events"], "seconds": seen["last"] - seen["first"], "cpu": cpu,
            "statements": statements}


def idle(args: argparse.Namespace) -> dict[str, Any]:
    prepare(args.dsn, args.url, max_batch=1, max_in_flight=args.max_in_flight, enabled=True)
    stats = Stats(args.url)
    started = [fleet.start(args.dsn)]
    latencies: list[float] = []
    try:
        fleet.ready(started)
        stats.get("/reset")
        with psycopg.connect(args.dsn) as conn:
            for n in range(args.samples + 1):
                outbox.publish(conn, "bench.idle", {"n": n})
                conn.commit()
                committed = time.perf_counter()
                deadline = time.monotonic() + 10
                while (seen := stats.get("/stats"))["events"] <= n:
                    if time.monotonic() > deadline:
                        raise RuntimeError("an idle event did not arrive within 10 s")
                    time.sleep(0.0005)
                if n:  # the first wakes the dispatcher's connections up: not counted
                    latencies.append(seen["last"] - committed)
                time.sleep(0.02)
    finally:
        fleet.stop([proc for proc, _ in started])
    return {"latencies": latencies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=("drain", "idle"))
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--max-batch", type=int, default=1)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--dispatchers", type=int, default=1)
    parser.add_argument("--tenants", type=int, default=0)
    parser.add_argument("--samples", type=int, default=60)
    args = parser.parse_args()
    print(json.dumps(drain(args) if args.task == "drain" else idle(args)))


if __name__ == "__main__":
    main()
