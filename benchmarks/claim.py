"""What one claim costs as the tables grow: the baseline is the same claim on a small table.

    python benchmarks/claim.py [--finished 1000000] [--hot-key 50000] [--against REF]

One throwaway PostgreSQL, one endpoint, 300 due unkeyed deliveries. The claim
statement (``claim`` in outbox/sql/queries/dispatch.sql, 100 rows, rolled
back after each run so every run sees the same rows) is timed:

1. with nothing else in the tables (the baseline);
2. after ``--finished`` delivered deliveries and their events (retention not
   yet run), vacuumed as autovacuum would;
3. with ``--hot-key`` more pending events on a single key published before the
   300 (a backlog one key cannot drain faster than one at a time), first as
   the claim meets it, then after ``park_blocked`` has taken the waiting rows
   out of its way (what the dispatcher does after a slow claim).

Medians of 15 runs each; the ratios to the baseline are what to read.
``--tenants N`` adds a row after the baseline: the same 300 rows spread over N
tenants, so that the claim deals its requests in rounds between them.
``--against REF`` (a git commit) times that commit's claim text beside this
tree's at each step, alternately, on the same rows: an A/B in one run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from typing import Any

import psycopg

import outbox
from dispatcher.limits.quota import HELD_BYTES
from outbox.migrate import migrate
from outbox.sql import _parse, queries
from outbox.testing import TemporaryPostgres

PARAMS = {"endpoint_ids": [1], "requests": [100], "held": [0], "prefetch": [0],
          "rows": [100], "floors": ["-infinity"], "ring_after": [None], "ring_null": [False],
          "ring_steps": 128, "lease_seconds": 30, "horizon": 0.25,
          "pace": 1.05, "budget": HELD_BYTES}


OLD_PARAMS = {"turn_after": [None], "turn_null": [False], "turn_steps": 128}  # earlier names
TEXTS: dict[str, bytes] = {"this tree": queries["claim"].encode()}


def claim_ms(conn: psycopg.Connection[Any], runs: int = 15) -> float:
    """The median of this tree's claim; with --against, each text's, printed after it."""
    times: dict[str, list[float]] = {name: [] for name in TEXTS}
    for _ in range(runs):
        for name, text in TEXTS.items():
            start = time.perf_counter()
            with conn.transaction(force_rollback=True):
                rows = conn.execute(text, PARAMS | OLD_PARAMS).fetchall()
            times[name].append((time.perf_counter() - start) * 1000)
            assert len(rows) == 100, (name, len(rows))
    medians = {name: statistics.median(found) for name, found in times.items()}
    if len(TEXTS) > 1:
        print("    " + ", ".join(f"{name}: {ms:.2f} ms" for name, ms in medians.items()))
    return medians["this tree"]


def against(ref: str) -> bytes:
    """The claim statement of commit ``ref``."""
    text = subprocess.run(["git", "show", f"{ref}:outbox/sql/queries/dispatch.sql"],
                          check=True, capture_output=True, text=True).stdout
    return _parse(text, ref)["claim"].encode()


def publish(conn: psycopg.Connection[Any], count: int, key: str | None = None) -> None:
    for start in range(0, count, 10_000):
        outbox.publish_many(conn, [outbox.Event("bench.event", {"n": i}, key=key)
                                   for i in range(start, min(count, start + 10_000))])
        conn.commit()


def vacuum(conn: psycopg.Connection[Any]) -> None:
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE outbox.deliveries")
    conn.execute("VACUUM ANALYZE outbox.events")
    conn.autocommit = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--hot-key", type=int, default=50_000)
    parser.add_argument("--tenants", type=int, default=0)
    parser.add_argument("--against", metavar="REF")
    args = parser.parse_args()
    if args.against:
        TEXTS[args.against] = against(args.against)
    with TemporaryPostgres() as pg, psycopg.connect(pg.dsn) as conn:
        migrate(conn)
        conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) "
                     "VALUES ('bench', 'http://127.0.0.1:9/', 100)")
        conn.commit()
        publish(conn, 300)
        vacuum(conn)
        base = claim_ms(conn)
        print(f"baseline: 300 due deliveries, nothing else          {base:8.2f} ms")
        if args.tenants:
            with conn.transaction():
                conn.execute("UPDATE outbox.deliveries SET tenant = 't' || (id %% %s)",
                             (args.tenants,))
            vacuum(conn)
            spread = claim_ms(conn)
            print(f"  the same over {args.tenants} tenants                    {spread:8.2f} ms "
                  f"({spread / base:.2f}x)")
            with conn.transaction():
                conn.execute("UPDATE outbox.deliveries SET tenant = NULL")
        with conn.transaction():
            conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now()")
        publish(conn, args.finished)
        with conn.transaction():
            conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now() "
                         "WHERE id > 300")
            conn.execute("UPDATE outbox.deliveries SET state = 'pending', finished_at = NULL "
                         "WHERE id <= 300")
        vacuum(conn)
        big = claim_ms(conn)
        print(f"+ {args.finished:,} delivered rows                      {big:8.2f} ms "
              f"({big / base:.2f}x)")
        with conn.transaction():
            conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() "
                         "WHERE state = 'pending'")
        publish(conn, args.hot_key, key="hot")
        with conn.transaction():  # the hot key's backlog is older than the 300
            conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() - interval '1h' "
                         "WHERE key = 'hot'")
        vacuum(conn)
        hot = claim_ms(conn, runs=5)
        print(f"+ {args.hot_key:,} pending on one key, older           {hot:8.2f} ms "
              f"({hot / base:.0f}x)")
        start = time.perf_counter()
        parked = 0
        while True:  # what the dispatcher does after a slow claim, until nothing is left
            rows = conn.execute(queries["park_blocked"],
                                {"endpoint_ids": [1], "budget": 5000}).fetchall()
            conn.commit()
            if not rows:
                break
            parked += len(rows)
        took = (time.perf_counter() - start) * 1000
        vacuum(conn)
        after = claim_ms(conn)
        print(f"  the same after parking ({parked:,} parked in {took:.0f} ms) {after:8.2f} ms "
              f"({after / base:.2f}x)")


if __name__ == "__main__":
    main()
