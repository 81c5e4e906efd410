"""Receivers that take their time: CPU per event when every answer comes after 200 ms.

    python benchmarks/slow_receivers.py [--concurrency 64,512,2048] [--endpoints 200]
                                        [--events 30000] [--delay 0.2] [--rounds 3]
                                        [--baseline DIR]

One throwaway PostgreSQL (fsync on), one local receiver that answers every
request after ``--delay`` seconds (the endpoints differ by path), and for each
``--concurrency`` in turn within each round a fresh database with
``--endpoints`` endpoints (default ``--max-in-flight`` 16) and ``--events``
events spread evenly over them, published beforehand. Per drain, from the
first arrival to the last:

* events/s, and its share of the ideal (``min(concurrency, endpoints x 16)``
  requests answered every ``--delay`` seconds);
* the dispatcher's CPU (user + system) per event, and PostgreSQL's beside it
  (work moved into the database is no saving);
* the dispatcher's peak resident memory (VmHWM).

Each round also drains the same backlog against a receiver that answers at
once, at the first concurrency: the fast receiver's CPU per event, the
reference the slow ones are held to. With ``--baseline DIR`` every
measurement is made twice in a row, with this tree's dispatcher and with
DIR's (another checkout), so that before and after share the machine's
weather; the ratios are taken within each round, then the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import psycopg
import throughput  # the shared receiver counter, CPU reader and dispatcher start/stop
from endpoints import prepare
from horizon import server_cpu

from outbox.testing import Receiver, Request, Response, TemporaryPostgres

MAX_IN_FLIGHT = 16  # the default


class Slow:
    """The shared arrival counter, answering after ``delay`` seconds."""

    def __init__(self, arrivals: throughput.Arrivals) -> None:
        self.arrivals = arrivals
        self.delay = 0.0

    def __call__(self, request: Request) -> Response:
        self.arrivals(request)
        return Response(204, delay=self.delay)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def drain(pg: TemporaryPostgres, url: str, slow: Slow, concurrency: int, endpoints: int,
          events: int, tree: str | None) -> dict[str, float]:
    dsn = prepare(pg.dsn, "slow", url, endpoints, events, MAX_IN_FLIGHT)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    arrivals = slow.arrivals
    arrivals.reset()
    proc = throughput.start_dispatcher(dsn, "--concurrency", str(concurrency), tree=tree)
    at_first: list[tuple[float, float]] = []
    arrivals.on_first = lambda: at_first.append(
        (throughput.cpu_seconds(proc.pid), server_cpu(pg.datadir)))
    try:
        arrivals.wait_for(events, [proc], 1800)
        time.sleep(slow.delay + 0.05)  # the last answers, and their results written
        cpu = throughput.cpu_seconds(proc.pid) - at_first[0][0]
        server = server_cpu(pg.datadir) - at_first[0][1]
        rss = peak_rss_mb(proc.pid)
        rate = arrivals.rate()
    finally:
        arrivals.on_first = lambda: None
        throughput.stop(proc)
    ideal = min(concurrency, endpoints * MAX_IN_FLIGHT) / slow.delay if slow.delay else 0.0
    return {"rate": rate, "share": rate / ideal if ideal else 0.0,
            "cpu_ms": cpu / events * 1000, "pg_ms": server / events * 1000, "rss": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="64,512,2048")
    parser.add_argument("--endpoints", type=int, default=200)
    parser.add_argument("--events", type=int, default=30000)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout: its dispatcher measured beside this one")
    args = parser.parse_args()
    levels = [int(n) for n in args.concurrency.split(",")]
    trees: list[str | None] = [None] if args.baseline is None else [
        None, os.path.abspath(args.baseline)]
    cases = [("fast", levels[0])] + [("slow", n) for n in levels]
    results: dict[tuple[str, int, str | None], list[dict[str, float]]] = {
        (kind, n, tree): [] for kind, n in cases for tree in trees}
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    slow = Slow(throughput.Arrivals())
    with TemporaryPostgres(fsync=True) as pg, Receiver(slow, record=False) as rx:
        for round_no in range(1, args.rounds + 1):
            for kind, n in cases:
                slow.delay = args.delay if kind == "slow" else 0.0
                for tree in trees:
                    got = drain(pg, rx.url, slow, n, args.endpoints, args.events, tree)
                    results[kind, n, tree].append(got)
                    print(f"round {round_no} {kind} c={n:5d} {'base' if tree else 'this'}: "
                          f"{got['rate']:7.0f} ev/s (share {got['share']:.2f}) "
                          f"{got['cpu_ms']:.3f} ms CPU/event, PostgreSQL {got['pg_ms']:.3f}, "
                          f"peak {got['rss']:.0f} MB", flush=True)
    print()
    print(f"{'receiver':>8} {'conc.':>6} {'tree':>5} {'events/s':>9} {'share':>6} "
          f"{'CPU ms/ev':>9} {'PG ms/ev':>9} {'peak MB':>8} {'CPU x base':>10}")
    for kind, n in cases:
        for tree in trees:
            rows = results[kind, n, tree]

            def med(key: str, rows: list[dict[str, float]] = rows) -> float:
                return statistics.median(r[key] for r in rows)
            versus = ""
            if args.baseline is not None and tree is None:
                base = results[kind, n, trees[1]]
                ratio = statistics.median(a["cpu_ms"] / b["cpu_ms"]
                                          for a, b in zip(rows, base, strict=True))
                versus = f"{ratio:9.2f}x"
            print(f"{kind:>8} {n:6d} {'base' if tree else 'this':>5} {med('rate'):9.0f} "
                  f"{med('share'):6.2f} {med('cpu_ms'):9.3f} {med('pg_ms'):9.3f} "
                  f"{med('rss'):8.0f} {versus:>10}")


if __name__ == "__main__":
    main()
