"""What watching idle databases costs: 200 databases nothing is published to, two dispatchers.

    python benchmarks/watching.py [--databases 200] [--minutes 5] [--tree PATH]
                                  [-- DISPATCHER OPTIONS...]

One throwaway PostgreSQL (fsync on), ``--databases`` copies of a migrated database with
one endpoint each, two dispatchers started with the same databases file and the default
options (and any given after ``--``). Once the first looks are done (a minute), nothing is
published for ``--minutes``; over that window it reports, from ``pg_stat_database`` and
``pg_stat_activity``:

* **sessions opened per database per minute** (every connection a dispatcher made to it:
  its looks, their measurements);
* **transactions committed per database per minute**, and **rows written** (the look's
  row in ``outbox.dispatchers``: updated in place);
* the **most connections** the dispatchers held at once (sampled every 0.2 s), against
  two times ``--max-connections``;
* the dispatchers' **CPU per database per hour**.

``--tree PATH`` runs the dispatcher of another checkout (a ``git worktree`` of an earlier
commit) on databases migrated by that checkout's schema, to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psycopg
import throughput  # CPU readers, the environment
from databases import make_databases, write_file

from outbox._postgres.cluster import free_port
from outbox.testing import TemporaryPostgres

_STATS = ("SELECT coalesce(sum(sessions), 0), coalesce(sum(xact_commit), 0), "
          "coalesce(sum(tup_inserted + tup_updated + tup_deleted), 0) "
          "FROM pg_stat_database WHERE datname LIKE 'bench\\_%%' "
          "AND datname <> 'bench_template'")


def totals(admin_dsn: str) -> tuple[int, int, int]:
    """Sessions, commits and rows written in the bench databases since the server began."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute(_STATS).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def held(admin_dsn: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name "
                            "LIKE 'outbox-dispatcher%'").fetchone()
    return int(row[0]) if row else 0


def start(path: Path, tree: Path | None, extra: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = dict(throughput.ENV)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "--databases", str(path), "--metrics-host",
         "127.0.0.1", "--metrics-port", str(port), "--log-level", "WARNING", *extra],
        env=env, cwd=tree)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("a dispatcher did not become ready")
        time.sleep(0.1)


def migrated_by(tree: Path, admin_dsn: str, url: str, count: int) -> list[str]:
    """make_databases, with the other checkout's migrations (its schema)."""
    code = ("import sys, json; sys.path.insert(0, 'benchmarks'); "
            "from databases import make_databases; "
            f"print(json.dumps(make_databases({admin_dsn!r}, {url!r}, {count})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": str(tree)})
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--tree", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="dispatcher options, after --")
    args = parser.parse_args()
    with (TemporaryPostgres(fsync=True, settings={"max_connections": "300"}) as pg,
          tempfile.TemporaryDirectory() as tmp):
        url = "http://127.0.0.1:9/hook"
        dsns = (make_databases(pg.dsn, url, args.databases) if args.tree is None
                else migrated_by(args.tree, pg.dsn, url, args.databases))
        path = write_file(Path(tmp) / "many.toml", dsns)
        procs = [start(path, args.tree, args.extra) for _ in range(2)]
        try:
            time.sleep(65)  # the members meet, the first looks (spread over a sweep) end
            most, stop = 0, threading.Event()

            def sample() -> None:
                nonlocal most
                while not stop.wait(0.2):
                    most = max(most, held(pg.dsn))
            sampler = threading.Thread(target=sample, daemon=True)
            sessions, commits, rows = totals(pg.dsn)
            cpu = sum(throughput.cpu_seconds(p.pid) for p, _ in procs)
            began = time.monotonic()
            sampler.start()
            time.sleep(args.minutes * 60)
            stop.set()
            sampler.join()
            minutes = (time.monotonic() - began) / 60
            cpu = sum(throughput.cpu_seconds(p.pid) for p, _ in procs) - cpu
            after = totals(pg.dsn)
        finally:
            for proc, _port in procs:
                throughput.stop(proc)
    per = args.databases * minutes
    print(f"{args.databases} idle databases, 2 dispatchers, {minutes:.1f} minutes"
          f"{' (' + ' '.join(args.extra) + ')' if args.extra else ''}"
          f"{f' (tree {args.tree})' if args.tree else ''}:")
    print(f"  sessions per database per minute  {(after[0] - sessions) / per:.3f}")
    print(f"  commits per database per minute   {(after[1] - commits) / per:.3f}")
    print(f"  rows written per database per minute {(after[2] - rows) / per:.3f}")
    print(f"  connections held at most          {most}")
    print(f"  CPU per database per hour         {cpu / args.databases * 60 / minutes:.2f} s")


if __name__ == "__main__":
    main()
