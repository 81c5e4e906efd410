"""The queue table at scale: claim and complete costs against a small table, and a long run.

    python benchmarks/scale.py [--finished 10000000] [--pending 1000000] [--runs 15] [--rounds 3]
    python benchmarks/scale.py --sustained-minutes 10 [--share 0.8]

One throwaway PostgreSQL (fsync on, data on disk, the schema's autovacuum
settings), one endpoint.

**Table size.** The claim statement (100 rows) and the complete statement
(those 100 rows delivered) are timed, each run rolled back so that every run
sees the same rows, in two databases of the server: one with 300 due
deliveries and nothing else (the baseline), one with the same 300 and
``--finished`` delivered deliveries with their events and ``--pending`` more
pending deliveries (written in bulk with SQL, then vacuumed and analysed as
autovacuum would). The two are timed in turn, ``--rounds`` times, medians of
``--runs`` each; the ratio is taken within each round.

**Sustained load.** The dispatcher's rate is measured on a backlog first
(its maximum here); then producers publish at ``--share`` of it, in small
transactions every 100 ms, for ``--sustained-minutes`` while the dispatcher
delivers. Every minute: events delivered per second, the backlog, the claim
and complete statements' mean time (pg_stat_statements), dead tuples in the
queue table and its size. What the run loses to dead tuples is the last
minutes' figures against the first's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import outbox
from dispatcher.limits.quota import HELD_BYTES
from dispatcher.policy.model import ClaimRow, Completed, Record
from outbox.migrate import migrate
from outbox.sql import queries
from outbox.testing import Receiver, TemporaryPostgres, free_port

sys.path.insert(0, str(Path(__file__).parent))
import throughput  # the shared receiver counter and dispatcher stop

DISPATCHER_OPTIONS = "-c jit=off"  # as the dispatcher's connections run (dispatcher/db.py)
CLAIM = {"endpoint_ids": [1], "requests": [100], "held": [0], "prefetch": [0], "rows": [100],
         "floors": ["-infinity"], "ring_after": [None], "ring_null": [False], "ring_steps": 128,
         "lease_seconds": 30, "horizon": 0.25, "pace": 1.05,
         "budget": HELD_BYTES}


def timed(conn: psycopg.Connection[Any], runs: int) -> tuple[float, float]:
    """Median ms of the claim of 100 rows, and of completing them; each run rolled back."""
    claims, completes = [], []
    for _ in range(runs):
        with conn.transaction(force_rollback=True):
            start = time.perf_counter()
            rows = conn.execute(queries["claim"], CLAIM).fetchall()
            claimed = time.perf_counter()
            claimed_rows = [ClaimRow._make(r) for r in rows]
            results = json.dumps([Record(c.id, c.lease_token, "delivered", status=200).as_row()
                                  for c in claimed_rows])
            slots = json.dumps([[c.endpoint_id, c.slot, str(c.slot_token)] for c in claimed_rows])
            [row] = conn.execute(queries["complete"], {
                "results": results, "slots": slots, "circuits": "[]"}).fetchall()
            completed = time.perf_counter()
        written = Completed.from_row(row).written
        assert len(rows) == 100, len(rows)
        assert len(written) == 100, len(written)
        claims.append((claimed - start) * 1000)
        completes.append((completed - claimed) * 1000)
    return statistics.median(claims), statistics.median(completes)


def vacuum(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE outbox.deliveries")
        conn.execute("VACUUM ANALYZE outbox.events")


def grow(dsn: str, finished: int, pending: int, due_in: str = "1 second") -> float:
    """Bulk rows: finished deliveries with their events, and more pending ones due
    ``due_in`` from now (an interval); seconds."""
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for state, count, age in (("delivered", finished, "2 days"), ("pending", pending, "0")):
            for first in range(0, count, 1_000_000):
                n = min(1_000_000, count - first)
                conn.execute(
                    "WITH ev AS (INSERT INTO outbox.events (id, type, payload, created_at, "
                    "deliver_after) SELECT gen_random_uuid(), 'bench.bulk', '{\"n\": 1}', "
                    "now() - %(age)s::interval, now() FROM generate_series(1, %(n)s) "
                    "RETURNING id, seq, created_at) "
                    "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, attempts, "
                    "next_attempt_at, created_at, finished_at) "
                    "SELECT id, 1, seq, %(state)s, %(attempts)s, "
                    # by default pending rows due after the 300 of the baseline, so the
                    # claim takes those
                    "now() + %(due_in)s::interval, created_at, "
                    "CASE WHEN %(state)s = 'delivered' THEN created_at END FROM ev",
                    {"age": age, "n": n, "state": state, "due_in": due_in,
                     "attempts": 1 if state == "delivered" else 0})
                print(f"  {first + n:>11,} {state}", flush=True)
    return time.perf_counter() - start


def prepare(dsn: str) -> None:
    """Schema, one endpoint, and the 300 due deliveries every timed claim takes."""
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) "
                     "VALUES ('bench', 'http://127.0.0.1:9/', 100)")
        conn.commit()
        outbox.publish_many(conn, [outbox.Event("bench.due", {"n": i}) for i in range(300)])
        conn.commit()


def table_size(finished: int, pending: int, runs: int, rounds: int) -> None:
    """The same 300 due rows in two databases of one server, one of them grown; timed in turn.

    Small and big are timed alternately, ``rounds`` times, so that both see
    the same machine: a ratio is taken within each round, and their median
    reported.
    """
    with TemporaryPostgres(fsync=True, tmpfs=False) as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE big")
        big_dsn = psycopg.conninfo.make_conninfo(pg.dsn, dbname="big")
        for dsn in (pg.dsn, big_dsn):
            prepare(dsn)
        took = grow(big_dsn, finished, pending)
        for dsn in (pg.dsn, big_dsn):
            vacuum(dsn)
        print(f"  written and vacuumed in {took:.0f} s", flush=True)
        claim_ratios, complete_ratios = [], []
        with (psycopg.connect(pg.dsn, options=DISPATCHER_OPTIONS) as small_conn,
              psycopg.connect(big_dsn, options=DISPATCHER_OPTIONS) as big_conn):
            for round_no in range(1, rounds + 1):
                base = timed(small_conn, runs)
                big = timed(big_conn, runs)
                claim_ratios.append(big[0] / base[0])
                complete_ratios.append(big[1] / base[1])
                print(f"round {round_no}: claim {base[0]:.2f} -> {big[0]:.2f} ms "
                      f"({claim_ratios[-1]:.2f}x), complete {base[1]:.2f} -> {big[1]:.2f} ms "
                      f"({complete_ratios[-1]:.2f}x)", flush=True)
        print(f"300 due deliveries alone against + {finished:,} finished and {pending:,} "
              f"pending, median of the rounds' ratios: claim "
              f"{statistics.median(claim_ratios):.2f}x, complete "
              f"{statistics.median(complete_ratios):.2f}x")


def start_dispatcher(dsn: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "--dsn", dsn, "--metrics-host", "127.0.0.1",
         "--metrics-port", str(free_port()), "--log-level", "WARNING"],
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


def maximum(dsn: str, arrivals: throughput.Arrivals, events: int = 20000) -> float:
    """The dispatcher's events/s on a backlog, once started."""
    with psycopg.connect(dsn) as conn:
        for first in range(0, events, 5000):
            outbox.publish_many(conn, [outbox.Event("bench.max", {"n": i})
                                       for i in range(first, first + 5000)])
            conn.commit()
    proc = start_dispatcher(dsn)
    try:
        while arrivals.count < 1000:
            time.sleep(0.01)
        start, first = time.perf_counter(), arrivals.count
        while arrivals.count < events:
            time.sleep(0.01)
        return (arrivals.count - first) / (time.perf_counter() - start)
    finally:
        throughput.stop(proc)


def produce(dsn: str, rate: float, until: float, published: list[int]) -> None:
    """Publish ``rate`` events/s, a transaction every 100 ms, until ``until``."""
    per_tick = max(1, round(rate / 10))
    tick = time.monotonic()
    with psycopg.connect(dsn) as conn:
        while tick < until:
            outbox.publish_many(conn, [outbox.Event("bench.load", {"n": i})
                                       for i in range(per_tick)])
            conn.commit()
            published[0] += per_tick
            tick += 0.1
            time.sleep(max(0.0, tick - time.monotonic()))


def minute_stats(conn: psycopg.Connection[Any]) -> dict[str, float]:
    row = conn.execute(
        "SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'deliveries'),"
        " pg_total_relation_size('outbox.deliveries'),"
        " (SELECT count(*) FROM outbox.deliveries WHERE state IN ('pending', 'in_flight')),"
        " (SELECT coalesce(sum(total_exec_time) / nullif(sum(calls), 0), 0)"
        "  FROM pg_stat_statements WHERE query LIKE '%%Claim due deliveries%%'),"
        " (SELECT coalesce(sum(total_exec_time) / nullif(sum(calls), 0), 0)"
        "  FROM pg_stat_statements WHERE query LIKE '%%Record the outcomes%%'),"
        " (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'deliveries')"
    ).fetchone()
    assert row is not None
    conn.execute("SELECT pg_stat_statements_reset()")
    dead, size, backlog, claim, complete, vacuums = row
    return {"dead": float(dead or 0), "size": float(size), "backlog": float(backlog),
            "claim": float(claim), "complete": float(complete), "vacuums": float(vacuums or 0)}


def sustained(minutes: float, share: float) -> None:
    arrivals = throughput.Arrivals()
    settings = {"shared_preload_libraries": "pg_stat_statements"}
    with (TemporaryPostgres(fsync=True, tmpfs=False, settings=settings) as pg,
          Receiver(arrivals, record=False) as rx):
        with psycopg.connect(pg.dsn) as conn:
            migrate(conn)
            conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) "
                         "VALUES ('bench', %s, 64)", (rx.url,))
            conn.commit()
        top = maximum(pg.dsn, arrivals)
        rate = top * share
        print(f"maximum {top:.0f} events/s; producing {rate:.0f} events/s for {minutes:g} min",
              flush=True)
        proc = start_dispatcher(pg.dsn)
        published = [0]
        until = time.monotonic() + minutes * 60
        producer = threading.Thread(target=produce, args=(pg.dsn, rate, until, published))
        try:
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                minute_stats(conn)
                producer.start()
                print("minute  delivered/s  backlog  claim ms  complete ms  dead tuples"
                      "  table MB  autovacuums", flush=True)
                minute, before = 0, arrivals.count
                while time.monotonic() < until:
                    time.sleep(60)
                    minute += 1
                    now = arrivals.count
                    s = minute_stats(conn)
                    print(f"{minute:>6}  {(now - before) / 60:>11.0f}  {s['backlog']:>7.0f}"
                          f"  {s['claim']:>8.2f}  {s['complete']:>11.2f}  {s['dead']:>11.0f}"
                          f"  {s['size'] / 2**20:>8.0f}  {s['vacuums']:>11.0f}", flush=True)
                    before = now
        finally:
            producer.join()
            throughput.stop(proc)
        print(f"published {published[0]:,}, delivered {arrivals.count:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15, help="timed claims per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sustained-minutes", type=float, default=0.0)
    parser.add_argument("--share", type=float, default=0.8)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    if args.sustained_minutes:
        sustained(args.sustained_minutes, args.share)
    else:
        table_size(args.finished, args.pending, args.runs, args.rounds)


if __name__ == "__main__":
    main()
