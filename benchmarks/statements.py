"""What the database does per delivered event, statement by statement, for one or more trees.

    ./dev bench statements [--against REF ...] [--no-this] [--events N] [--max-batch N]
                           [--dispatchers N] [--tenants N] [--rounds N] [--top N]

Each tree (this one, and every REF installed as the release guard installs
it) drains the same backlog (``guard_side.py drain``) on one throwaway
PostgreSQL that loads ``pg_stat_statements`` and logs lock waits over 5 ms;
the figures do not depend on how busy the machine is:

* per statement (its name, else its first words): calls per delivered event,
  rows per call, shared blocks hit and read per event, the server's time per
  call and per event (these two do depend on load), and plans made per call
  with their time (a prepared statement that keeps a generic plan makes
  almost none);
* rows per call of the claim: the events one claim hands over;
* lock waits the server logged during the drain.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import guard  # the trees' installs, the receiver's reset
import throughput  # the receiver

NAMES = (  # the first words of a statement, and its name (earlier trees' too)
    ("WITH wanted AS", "claim"),
    ("WITH RECURSIVE wanted AS", "claim"),
    ("WITH RECURSIVE floors", "due_endpoints"),
    ("WITH RECURSIVE walk", "due_endpoints"),
    ("WITH r AS", "complete"),
    ("WITH input AS", "publish_many"),
)


def name_of(query: str) -> str:
    text = re.sub(r"--[^\n]*", "", query)
    text = " ".join(text.split())
    for start, name in NAMES:
        if text.startswith(start):
            return name
    return text[:60]


def snapshot(conn: psycopg.Connection[Any], dbname: str) -> dict[str, list[float]]:
    rows = conn.execute(
        "SELECT s.query, s.calls, s.rows, s.shared_blks_hit, s.shared_blks_read, "
        "s.total_exec_time, s.plans, s.total_plan_time FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", (dbname,)).fetchall()
    out: dict[str, list[float]] = {}
    for query, *figures in rows:
        name = name_of(query)
        old = out.setdefault(name, [0.0] * 7)
        for i, value in enumerate(figures):
            old[i] += float(value)
    return out


def run_tree(tree: guard.Tree, pg: Any, url: str, args: argparse.Namespace,
             made: list[int]) -> None:
    made[0] += 1
    dbname = f"stmts_{made[0]}"
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')  # a name made here
    log_start = pg.logfile.stat().st_size if pg.logfile.exists() else 0
    try:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
        done = subprocess.run(
            [str(tree.python), str(guard.ROOT / "benchmarks" / "guard_side.py"), "drain",
             "--dsn", pg.dsn_for(dbname), "--url", url, "--events", str(args.events),
             "--max-batch", str(args.max_batch), "--dispatchers", str(args.dispatchers),
             *(["--tenants", str(args.tenants)] if args.tenants else [])],
            cwd=tree.folder, env=guard.side_env(), capture_output=True, text=True,
            check=False, timeout=1200)
        if done.returncode != 0:
            raise SystemExit(f"{tree.label}: {guard.last_words(done.stderr)}")
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            stats = snapshot(conn, dbname)
    finally:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    events = answer["events"]
    print(f"\n{tree.label}: {events:,} events in {answer['seconds']:.2f} s, "
          f"{answer['cpu'] / events * 1000:.3f} ms dispatcher CPU/event, "
          f"{answer['statements'] / events:.4f} transactions/event")
    print(f"  {'statement':<62} {'calls/ev':>9} {'rows/call':>9} {'hit/ev':>8} "
          f"{'read/ev':>8} {'ms/call':>8} {'ms/ev':>7} {'plans/c':>7} {'plan ms':>7}")
    ranked = sorted(((name, figures) for name, figures in stats.items() if figures[0] > 1),
                    key=lambda kv: -kv[1][4])  # statements run once (the schema's) left out
    for name, (calls, rows, hit, read, total, plans, plan_ms) in ranked[:args.top]:
        print(f"  {name:<62} {calls / events:9.4f} {rows / max(calls, 1):9.1f} "
              f"{hit / events:8.2f} {read / events:8.3f} {total / max(calls, 1):8.3f} "
              f"{total / events:7.4f} {plans / max(calls, 1):7.2f} "
              f"{plan_ms / max(plans, 1):7.3f}")
    log = pg.logfile.read_text(errors="replace")[log_start:] if pg.logfile.exists() else ""
    waits = [line for line in log.splitlines() if "still waiting" in line
             or "acquired" in line]
    print(f"  lock waits logged (> 5 ms): {len(waits)}")
    for line in waits[:5]:
        print("    " + line[:200])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", action="append", default=[], metavar="REF")
    parser.add_argument("--no-this", action="store_true", help="leave this tree out")
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--max-batch", type=int, default=1)
    parser.add_argument("--dispatchers", type=int, default=1)
    parser.add_argument("--tenants", type=int, default=0,
                        help="the backlog spread over this many tenants (trees with tenants)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    from outbox.testing import Receiver, TemporaryPostgres

    try:
        trees = [] if args.no_this else [guard.this_tree()]
        trees += [guard.install_ref(ref) for ref in args.against]
    except guard.BadRef as error:
        parser.exit(2, f"statements: {error}\n")
    except guard.GuardError as error:
        parser.exit(1, f"statements: {error}\n")
    settings = {"shared_preload_libraries": "pg_stat_statements",
                "pg_stat_statements.track": "top", "pg_stat_statements.track_planning": "on",
                "log_lock_waits": "on",
                "deadlock_timeout": "5ms", "track_io_timing": "on"}
    made = [0]
    with (TemporaryPostgres(fsync=True, tmpfs=False, settings=settings) as pg,
          Receiver(throughput.Arrivals(), record=False) as rx):
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for _ in range(args.rounds):
            for tree in trees:
                run_tree(tree, pg, rx.url, args, made)


if __name__ == "__main__":
    main()
