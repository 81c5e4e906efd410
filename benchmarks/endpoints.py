"""Many endpoints, one dispatcher: throughput and idle cost against one endpoint, same run.

    python benchmarks/endpoints.py [--endpoints 1,100,1000,10000] [--events 20000]
                                   [--rounds 3] [--idle-seconds 10] [--max-in-flight N]

One throwaway PostgreSQL (fsync on), one lean local receiver (so one
connection pool: the endpoints differ by path), one dispatcher with its
default options. For each endpoint count N, in turn within each round, a
fresh database with endpoints c0 .. cN-1, endpoint cI subscribed to type t.I:

* drain: ``--events`` events published beforehand, spread evenly over the N
  types; events/s from the first arrival to the last, and the dispatcher's
  CPU (user + system) per event over the same span;
* idle: the same dispatcher once everything is delivered and it has settled,
  for ``--idle-seconds``: its CPU per second, and the statements per second
  it sends (counted in the server's log).

Prints per count the medians and the ratios to one endpoint (ratios taken
within each round, then the median); the figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
import throughput  # the shared receiver counter, CPU reader and dispatcher start/stop
from psycopg import sql

import outbox
from outbox.migrate import migrate
from outbox.testing import Receiver, TemporaryPostgres


def prepare(admin_dsn: str, dbname: str, url: str, endpoints: int, events: int,
            max_in_flight: int) -> str:
    """A fresh database with the endpoints and the backlog; its DSN."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(dbname)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=dbname)
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        conn.execute(
            "INSERT INTO outbox.endpoints (name, url, events, events_like, max_in_flight)"
            " SELECT 'c' || i, %s || 'c' || i, ARRAY['t.' || i], ARRAY['t.' || i], %s"
            " FROM generate_series(0, %s) AS i", (url, max_in_flight, endpoints - 1))
        conn.commit()
        batch: list[outbox.Event] = []
        for n in range(events):
            batch.append(outbox.Event(f"t.{n % endpoints}", {"n": n}))
            if len(batch) == 1000:
                outbox.publish_many(conn, batch)
                conn.commit()
                batch = []
        if batch:
            outbox.publish_many(conn, batch)
            conn.commit()
        conn.execute("ANALYZE")
        conn.commit()
    return dsn


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of a process so far, in nanoseconds (schedstat's run time:
    finer than the clock ticks of /proc/PID/stat, which an idle process barely moves)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


class StatementLog:
    """Counts the statements the server runs while it is open, from its log.

    ``log_statement = all`` is turned on (and off) for the whole server by a
    configuration reload, which running sessions follow; the counter's own
    statements are left out. (pg_stat_database's commit counts would include
    autovacuum, which runs right after a drain.)
    """

    def __init__(self, admin_dsn: str, logfile: Path) -> None:
        self._admin_dsn, self._logfile = admin_dsn, logfile
        self._start = 0
        self.count = 0

    def _set(self, value: str) -> None:
        with psycopg.connect(self._admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER SYSTEM SET log_statement = {}").format(
                sql.Literal(value)))
            admin.execute("SELECT pg_reload_conf()")
        time.sleep(0.2)

    def __enter__(self) -> StatementLog:
        self._set("all")
        self._start = self._logfile.stat().st_size
        return self

    def __exit__(self, *_: object) -> None:
        self.count = sum(
            1 for line in self._logfile.read_text(errors="replace")[self._start:].splitlines()
            if ("statement: " in line or "execute " in line)
            and "log_statement" not in line and "pg_reload_conf" not in line)
        self._set("none")


def measure(admin_dsn: str, logfile: Path, url: str, arrivals: throughput.Arrivals, endpoints: int,
            events: int, idle_seconds: float, max_in_flight: int) -> dict[str, float]:
    dbname = f"endpoints_{endpoints}"
    dsn = prepare(admin_dsn, dbname, url, endpoints, events, max_in_flight)
    arrivals.reset()
    proc = throughput.start_dispatcher(dsn)
    cpu_at_first: list[float] = []
    arrivals.on_first = lambda: cpu_at_first.append(throughput.cpu_seconds(proc.pid))
    try:
        arrivals.wait_for(events, [proc], 900)
        drain_cpu = throughput.cpu_seconds(proc.pid) - cpu_at_first[0]
        rate = arrivals.rate()
        time.sleep(3)  # results written, leases dropped: idle from here
        with StatementLog(admin_dsn, logfile) as statements:
            cpu0, t0 = cpu_ns(proc.pid), time.monotonic()
            time.sleep(idle_seconds)
            cpu1, t1 = cpu_ns(proc.pid), time.monotonic()
    finally:
        arrivals.on_first = lambda: None
        throughput.stop(proc)
    return {"rate": rate, "cpu_ms": drain_cpu / events * 1000,
            "idle_cpu_ms": (cpu1 - cpu0) / 1e6 / (t1 - t0),
            "idle_stmts": statements.count / (t1 - t0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", default="1,100,1000,10000")
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--max-in-flight", type=int, default=16,
                        help="every endpoint's --max-in-flight (default 16, the default; 64 "
                        "lets one endpoint use all of the dispatcher's --concurrency)")
    args = parser.parse_args()
    counts = [int(n) for n in args.endpoints.split(",")]
    arrivals = throughput.Arrivals()
    results: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    with (TemporaryPostgres(fsync=True) as pg, Receiver(arrivals, record=False) as rx):
        for round_no in range(1, args.rounds + 1):
            for n in counts:
                got = measure(pg.dsn, pg.logfile, rx.url, arrivals, n, args.events,
                              args.idle_seconds, args.max_in_flight)
                results[n].append(got)
                print(f"round {round_no} {n:6d} endpoints: {got['rate']:7.0f} ev/s "
                      f"{got['cpu_ms']:.3f} ms CPU/event; idle {got['idle_cpu_ms']:.1f} ms "
                      f"CPU/s, {got['idle_stmts']:.1f} statements/s", flush=True)
    base = counts[0]
    print()
    print(f"{'endpoints':>9} {'events/s':>9} {'x':>6} {'CPU ms/ev':>9} {'x':>6} "
          f"{'idle CPU ms/s':>13} {'x':>6} {'idle stmts/s':>12}")
    for n in counts:
        def med(key: str, rows: list[dict[str, Any]] = results[n]) -> float:
            return statistics.median(r[key] for r in rows)

        def ratio(key: str, n: int = n) -> float:
            return statistics.median(a[key] / b[key] for a, b in
                                     zip(results[n], results[base], strict=True))
        print(f"{n:9d} {med('rate'):9.0f} {ratio('rate'):5.2f}x {med('cpu_ms'):9.3f} "
              f"{ratio('cpu_ms'):5.2f}x {med('idle_cpu_ms'):13.1f} {ratio('idle_cpu_ms'):5.2f}x "
              f"{med('idle_stmts'):12.1f}")


if __name__ == "__main__":
    main()
