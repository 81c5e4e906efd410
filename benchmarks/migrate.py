"""Upgrades on a big queue table: the locks each step holds, and publish() during a no-op migrate.

    python benchmarks/migrate.py [--finished 10000000] [--pending 1000000] [--runs 3]

One throwaway PostgreSQL (fsync on, data on disk), one database made by the
oldest release's schema (tests/fixtures/releases) and grown in bulk to
``--finished`` delivered deliveries with their events and ``--pending``
pending ones (then vacuumed and analysed, as autovacuum would).

**Each step.** Every numbered step is run ``--runs`` times in a transaction
that is rolled back (so that each run sees the same table), then once for
real, before the next step. Reported: the step's whole transaction, from its
first statement to its end, which bounds how long any lock it takes is held;
the locks it holds that conflict with ROW EXCLUSIVE (what publish() takes) on
an ``outbox`` table, read from pg_locks before the end; and the slowest
publish() of a producer publishing in a loop meanwhile. Whether the step
rewrote ``outbox.deliveries`` or ``outbox.events`` is read from their
relfilenode, before and after the real run.

**No-op migrate.** On the upgraded database, with one transaction open that
has published (the issue's slow request), a producer publishes one event per
transaction for ``--seconds``, alone and then while ``migrate()`` runs in a
loop beside it (a database already current: nothing to do); ``--runs``
rounds, alone and beside in turn. Reported: median and slowest publish().

**A step behind a long transaction.** With that transaction open, a step
that needs ``outbox.events`` exclusively (an ADD COLUMN, made up for the
benchmark) is tried with the default lock timeout and attempts while the
producer publishes: how long migrate takes to give up, and the slowest
publish() meanwhile (each failed try holds publishers back for at most the
lock timeout, then lets them through).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import outbox
from outbox.migrate import SCHEMA_VERSION, MigrationBlocked, migrate
from outbox.sql import Step, queries, steps
from outbox.testing import TemporaryPostgres

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import scale  # the bulk rows of the queue table at scale

from tests.support.releases import Release, releases

BLOCKS_PUBLISH = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")


_LOOP = """
import json, sys, threading, time
import psycopg, outbox
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
latencies = []
with psycopg.connect(sys.argv[1]) as conn:
    print("started", flush=True)
    while not stop.is_set():
        start = time.perf_counter()
        outbox.publish(conn, "bench.during", {"n": 1})
        conn.commit()
        latencies.append(time.perf_counter() - start)
print(json.dumps(latencies))
"""


class Publisher:
    """A producer publishing one event per transaction until stopped, in its own process.

    ``release``: run that earlier release's publish() (the pods not yet
    replaced while a step runs); None: this tree's.
    """

    def __init__(self, dsn: str, release: Release | None = None) -> None:
        env = release.environment() if release else None
        cwd = release.sources() if release else None
        self.process = subprocess.Popen([sys.executable, "-c", _LOOP, dsn], env=env, cwd=cwd,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "started"

    def finish(self) -> list[float]:
        out, _ = self.process.communicate("stop\n", timeout=120)
        latencies: list[float] = json.loads(out.strip().splitlines()[-1])
        return latencies


def grow(dsn: str, finished: int, pending: int) -> float:
    """Bulk rows as benchmarks/scale.py writes them (pending ones due a day from now),
    vacuumed and analysed; seconds."""
    start = time.perf_counter()
    scale.grow(dsn, finished, pending, due_in="1 day")
    scale.vacuum(dsn)
    return time.perf_counter() - start


def relfilenodes(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute("SELECT pg_relation_filenode('outbox.deliveries'), "
                       "pg_relation_filenode('outbox.events')").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def run_step(dsn: str, sql: str, version: int, *, commit: bool,
             ) -> tuple[float, list[str], float]:
    """One step in one transaction: its duration, its publish-blocking locks, slowest publish."""
    # The publishers that run during an upgrade are the last release's: this tree's
    # need the whole schema, which a step of it is still making.
    before = max((r for r in releases() if r.version < version), key=lambda r: r.version)
    publisher = Publisher(dsn, before)
    time.sleep(0.3)  # the producer is under way
    with psycopg.connect(dsn) as conn:
        # Tables the step makes are locked too, but nobody else can see them yet.
        existing = [r[0] for r in conn.execute(
            "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'outbox'").fetchall()]
        conn.commit()
        start = time.perf_counter()
        with conn.transaction(force_rollback=not commit):
            conn.execute(queries["migrate_lock"])
            conn.execute(queries["set_lock_timeout"], {"lock_timeout": "500ms", "local": True})
            conn.execute(sql.encode())
            conn.execute(queries["record_version"], {"version": version})
            locks = [f"{rel} {mode}" for rel, mode in conn.execute(
                "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE l.pid = pg_backend_pid() "
                "AND n.nspname = 'outbox' AND l.mode = ANY (%s) AND c.oid = ANY (%s) "
                "ORDER BY 1, 2", (list(BLOCKS_PUBLISH), existing)).fetchall()]
        took = time.perf_counter() - start
    time.sleep(0.3)
    return took, locks, max(publisher.finish())


def run_outside(dsn: str, step: Step) -> tuple[float, list[str], float]:
    """A no-transaction step (CREATE INDEX CONCURRENTLY and the like), run once for real as
    the migrator runs it, statement by statement: its duration, the publish-blocking locks
    a watcher saw it hold (sampled every millisecond), the slowest publish meanwhile."""
    before = max((r for r in releases() if r.version < step.version), key=lambda r: r.version)
    publisher = Publisher(dsn, before)
    time.sleep(0.3)
    seen: set[str] = set()
    done = threading.Event()
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid

        def watch() -> None:
            with psycopg.connect(dsn, autocommit=True) as spy:
                while not done.is_set():
                    seen.update(f"{rel} {mode}" for rel, mode in spy.execute(
                        "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c "
                        "ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE l.pid = %s AND l.granted AND n.nspname = 'outbox' "
                        "AND c.relkind = 'r' AND l.mode = ANY (%s)",
                        (pid, list(BLOCKS_PUBLISH))).fetchall())
                    time.sleep(0.001)

        watcher = threading.Thread(target=watch)
        watcher.start()
        start = time.perf_counter()
        conn.execute(queries["set_lock_timeout"], {"lock_timeout": "500ms", "local": False})
        for statement in step.statements():
            conn.execute(statement.encode())
        conn.execute(queries["record_version"], {"version": step.version})
        took = time.perf_counter() - start
        done.set()
        watcher.join()
    time.sleep(0.3)
    return took, sorted(seen), max(publisher.finish())


def steps_part(dsn: str, runs: int) -> None:
    print("\n| step | transaction (median of runs) | max | locks blocking publish() "
          "| slowest publish() meanwhile | rewrote deliveries/events |")
    print("| --- | ---: | ---: | --- | ---: | --- |")
    oldest = releases()[0].version
    for step in (s for s in steps() if s.version > oldest):
        with psycopg.connect(dsn) as conn:
            before = relfilenodes(conn)
        if step.transactional:
            results = [run_step(dsn, step.sql, step.version, commit=False) for _ in range(runs)]
            run_step(dsn, step.sql, step.version, commit=True)
        else:  # cannot be rolled back: once, for real
            results = [run_outside(dsn, step)]
        with psycopg.connect(dsn) as conn:
            after = relfilenodes(conn)
        durations = [r[0] for r in results]
        locks = sorted({lock for r in results for lock in r[1]})
        print(f"| {step.name} | {statistics.median(durations) * 1000:.1f} ms "
              f"| {max(durations) * 1000:.1f} ms | {', '.join(locks) or 'none'} "
              f"| {statistics.median(r[2] for r in results) * 1000:.1f} ms "
              f"| {'yes' if before != after else 'no'} |", flush=True)


def noop_part(dsn: str, runs: int, seconds: float) -> None:
    def window(beside: bool) -> list[float]:
        stop = threading.Event()
        migrations = 0

        def migrator() -> None:
            nonlocal migrations
            with psycopg.connect(dsn) as conn:
                while not stop.is_set():
                    migrate(conn)
                    migrations += 1

        helper = threading.Thread(target=migrator, daemon=True)
        publisher = Publisher(dsn)
        if beside:
            helper.start()
        time.sleep(seconds)
        stop.set()
        if beside:
            helper.join()
            print(f"    ({migrations} no-op migrations in {seconds:g} s)", flush=True)
        return publisher.finish()

    print("\n| round | publish() alone: median | max | beside no-op migrate: median | max |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    with psycopg.connect(dsn) as slow:
        outbox.publish(slow, "bench.slow_request", {"n": 0})  # left open: the slow request
        for round_ in range(1, runs + 1):
            alone, beside = window(False), window(True)
            print(f"| {round_} | {statistics.median(alone) * 1000:.2f} ms "
                  f"| {max(alone) * 1000:.1f} ms | {statistics.median(beside) * 1000:.2f} ms "
                  f"| {max(beside) * 1000:.1f} ms |", flush=True)
        slow.rollback()


def blocked_part(dsn: str, runs: int) -> None:
    """A step that must wait behind a long transaction: how long publish() is held back."""
    extra = Step(SCHEMA_VERSION + 1, f"{SCHEMA_VERSION + 1:04d}_bench_probe",
                 "ALTER TABLE outbox.events ADD COLUMN bench_probe text;")
    print("\n| run | migrate gave up after | publish() meanwhile: median | slowest |")
    print("| ---: | ---: | ---: | ---: |")
    for run in range(1, runs + 1):
        with psycopg.connect(dsn) as slow, psycopg.connect(dsn) as conn:
            outbox.publish(slow, "bench.slow_request", {"n": 0})  # left open
            publisher = Publisher(dsn)
            start = time.perf_counter()
            try:
                migrate(conn, available=[*steps(), extra])
                raise SystemExit("the step should have given up")
            except MigrationBlocked:
                took = time.perf_counter() - start
            latencies = publisher.finish()
            slow.rollback()
        print(f"| {run} | {took:.1f} s | {statistics.median(latencies) * 1000:.2f} ms "
              f"| {max(latencies) * 1000:.0f} ms |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with TemporaryPostgres(fsync=True, tmpfs=False) as pg:
        pg.wait_ready()
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute(releases()[0].schema_sql().encode())
            conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) "
                         "VALUES ('bench', 'http://127.0.0.1:9/', 16)")
        print(f"growing: {args.finished:,} finished, {args.pending:,} pending", flush=True)
        print(f"  {grow(pg.dsn, args.finished, args.pending):.0f} s", flush=True)
        steps_part(pg.dsn, args.runs)
        noop_part(pg.dsn, args.runs, args.seconds)
        blocked_part(pg.dsn, args.runs)


if __name__ == "__main__":
    main()
