"""Many databases, one fleet: 200 databases in one server served by two dispatchers.

    python benchmarks/databases.py [--databases 200] [--idle-seconds 30] [--samples 60]
                                   [--backlog 50000] [--quiet-seconds 20]

One throwaway PostgreSQL (fsync on), ``--databases`` copies of a migrated database with
one endpoint each (a local receiver answering 204 at once), two dispatchers started with
the same databases file and the default options (``--max-connections 20``). It reports:

* **connections held** by the dispatchers (``pg_stat_activity``), idle and at most while
  draining;
* **idle CPU** of the two dispatchers over ``--idle-seconds`` without work, per database
  per hour;
* **idle latency**: ``--samples`` events, one every 0.5 s, each into a database chosen at
  random (almost all without recent work): commit to arrival p50 and p99;
* **a quiet database behind a backlog**: ``--backlog`` events published into one
  database, then one event every 100 ms for ``--quiet-seconds`` into another: the quiet
  database's commit to arrival p50 and p99;
* **events/s** draining ``--backlog`` events spread evenly over all the databases, against
  the same number in one database (a file listing it alone, the same two dispatchers).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import throughput  # the receiver's arrivals, CPU readers
from psycopg import sql

import outbox
from outbox._postgres.cluster import free_port
from outbox.migrate import migrate
from outbox.testing import Receiver, TemporaryPostgres

APP = "outbox-dispatcher%"


def make_databases(admin_dsn: str, url: str, count: int) -> list[str]:
    """A migrated template with one endpoint, and ``count`` copies of it; their DSNs."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute("CREATE DATABASE bench_template")
    template = psycopg.conninfo.make_conninfo(admin_dsn, dbname="bench_template")
    with psycopg.connect(template) as conn:
        migrate(conn)
        conn.execute("INSERT INTO outbox.endpoints (name, url, events, events_like) "
                     "VALUES ('hook', %s, '{*}', '{%%}')", (url,))
    dsns = []
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        for i in range(count):
            name = f"bench_{i:03d}"
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE bench_template").format(
                sql.Identifier(name)))
            dsns.append(psycopg.conninfo.make_conninfo(admin_dsn, dbname=name))
    return dsns


def write_file(path: Path, dsns: list[str]) -> Path:
    lines = []
    for i, dsn in enumerate(dsns):
        lines += ["[[database]]", f'name = "db{i:03d}"', f"dsn = {dsn!r}", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@contextlib.contextmanager
def fleet(path: Path, count: int = 2, *, settle: bool = True,
          ) -> Iterator[list[tuple[subprocess.Popen[bytes], int]]]:
    """``count`` dispatchers on the file, each with its metrics port; ``settle``: ready,
    and a few seconds more for the members to see each other and the first looks."""
    procs = []
    for _ in range(count):
        port = free_port()
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "--databases", str(path),
             "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
             "--log-level", "WARNING", "--retention", "0"], env=throughput.ENV), port))
    try:
        for _proc, port in procs if settle else ():
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("a dispatcher did not become ready")
                time.sleep(0.1)
        if settle:
            time.sleep(3)
        yield procs
    finally:
        for proc, _port in procs:
            throughput.stop(proc)


def same_owner(procs: list[tuple[subprocess.Popen[bytes], int]], index: int) -> int:
    """Another database served by the dispatcher that serves database ``index``."""
    for _proc, port in procs:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        served = sorted(int(m.group(1)) for m in re.finditer(
            r'^outbox_database_up\{database="db(\d+)"\} 1', text, re.M))
        if index in served:
            return next(i for i in served if i != index)
    raise RuntimeError(f"no dispatcher serves db{index:03d}")


def connections(admin_dsn: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity "
                            "WHERE application_name LIKE %s", (APP,)).fetchone()
    return int(row[0]) if row else 0


def publish_one(dsn: str) -> tuple[str, float]:
    """One event, committed; its id and the commit's moment (perf_counter)."""
    with psycopg.connect(dsn) as conn:
        event = outbox.publish(conn, "bench.event", {})
        conn.commit()
        return str(event), time.perf_counter()


def wait_ids(arrivals: throughput.Arrivals, ids: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ids <= set(arrivals.by_id):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(ids - set(arrivals.by_id))} events never arrived")
        time.sleep(0.01)


def sample(arrivals: throughput.Arrivals, pick: Callable[[], str], gap: float,
           keep_going: Callable[[int], bool]) -> dict[str, float]:
    """Events published one at a time, ``gap`` s apart, each into the database ``pick``
    names, while ``keep_going(events so far)``; once all arrived, their commit moments."""
    sent: dict[str, float] = {}
    while keep_going(len(sent)):
        event, at = publish_one(pick())
        sent[event] = at
        time.sleep(gap)
    wait_ids(arrivals, set(sent), 60)
    return sent


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latencies(arrivals: throughput.Arrivals, sent: dict[str, float]) -> list[float]:
    return [arrivals.by_id[i] - t for i, t in sent.items()]


def backlog(dsn: str, events: int) -> None:
    with psycopg.connect(dsn) as conn:
        for start in range(0, events, 1000):
            outbox.publish_many(conn, [outbox.Event("bench.backlog", {"n": n})
                                       for n in range(start, min(events, start + 1000))])
            conn.commit()


def drain_rate(arrivals: throughput.Arrivals, admin_dsn: str, total: int,
               procs: list[tuple[subprocess.Popen[bytes], int]]) -> tuple[float, int, float]:
    """Events/s from first to last arrival, the most connections seen, CPU ms per event
    (from the dispatchers' start)."""
    cpu = 0.0
    most = 0
    deadline = time.monotonic() + 600
    while arrivals.count < total:
        most = max(most, connections(admin_dsn))
        if time.monotonic() > deadline:
            raise RuntimeError(f"delivered {arrivals.count} of {total}")
        time.sleep(0.25)
    cpu = sum(throughput.cpu_seconds(p.pid) for p, _ in procs) - cpu
    return arrivals.rate(), most, cpu * 1000 / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--quiet-seconds", type=float, default=20.0)
    args = parser.parse_args()
    arrivals = throughput.Arrivals()
    arrivals.track_ids = True
    with (TemporaryPostgres(fsync=True, settings={"max_connections": "300"}) as pg,
          Receiver(arrivals, record=False) as rx, tempfile.TemporaryDirectory() as tmp):
        started = time.monotonic()
        dsns = make_databases(pg.dsn, rx.url, args.databases)
        print(f"{args.databases} databases made in {time.monotonic() - started:.1f} s")
        many = write_file(Path(tmp) / "many.toml", dsns)
        with fleet(many) as procs:
            cpu = sum(throughput.cpu_seconds(p.pid) for p, _ in procs)
            time.sleep(args.idle_seconds)
            cpu = sum(throughput.cpu_seconds(p.pid) for p, _ in procs) - cpu
            held = connections(pg.dsn)
            per_hour = cpu / args.databases * 3600 / args.idle_seconds
            print(f"idle: {held} connections held by 2 dispatchers; CPU {per_hour * 1000:.1f} "
                  f"ms per database per hour ({cpu:.2f} s over {args.idle_seconds:g} s)")

            sent = sample(arrivals, lambda: random.choice(dsns), 0.5,
                          lambda count: count < args.samples)
            idle = latencies(arrivals, sent)
            print(f"idle latency over {len(idle)} events into databases at random: "
                  f"p50 {pct(idle, 0.5) * 1000:.0f} ms, p99 {pct(idle, 0.99) * 1000:.0f} ms, "
                  f"max {max(idle) * 1000:.0f} ms")

            # The quiet database is one the backlog's dispatcher serves too (the harder
            # case: one process, one event loop), busy a moment ago (one event delivered).
            quiet_dsn = dsns[same_owner(procs, 0)]
            warm, _at = publish_one(quiet_dsn)
            wait_ids(arrivals, {warm}, 60)
            backlog(dsns[0], args.backlog)
            end = time.monotonic() + args.quiet_seconds
            quiet = sample(arrivals, lambda: quiet_dsn, 0.1,
                           lambda _count: time.monotonic() < end)
            behind = latencies(arrivals, quiet)
            print(f"a quiet database behind a backlog of {args.backlog:,} in another served by "
                  f"the same dispatcher: p50 {pct(behind, 0.5) * 1000:.0f} ms, p99 "
                  f"{pct(behind, 0.99) * 1000:.0f} ms, max {max(behind) * 1000:.0f} ms over "
                  f"{len(behind)} events")
            sent[warm] = 0.0  # counted among the arrivals below
            arrivals.wait_for(args.backlog + len(quiet) + len(sent), [p for p, _ in procs], 600)

        per = args.backlog // args.databases
        arrivals.reset()
        for dsn in dsns:
            backlog(dsn, per)
        with fleet(many, settle=False) as procs:
            spread, most, cpu_event = drain_rate(arrivals, pg.dsn, per * len(dsns), procs)
        one_file = write_file(Path(tmp) / "one.toml", dsns[-1:])
        arrivals.reset()
        backlog(dsns[-1], per * len(dsns))
        with fleet(one_file, settle=False) as procs:
            alone, most_one, cpu_one = drain_rate(arrivals, pg.dsn, per * len(dsns), procs)
        print(f"draining {per * len(dsns):,} events: over {len(dsns)} databases "
              f"{spread:,.0f} events/s ({cpu_event:.3f} ms CPU per event, at most {most} "
              f"connections); in one database {alone:,.0f} events/s ({cpu_one:.3f} ms, at "
              f"most {most_one}): {spread / alone:.2f}x")
        print(f"median idle latency {statistics.median(idle) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
