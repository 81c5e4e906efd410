"""/metrics with many endpoints: the series one scrape holds, and what a scrape costs.

    python benchmarks/metrics_series.py [--endpoints 5000] [--runs 3] [--scrapes 5]
                                        [--baseline DIR]

One throwaway PostgreSQL, one database with ``--endpoints`` endpoints, each a
customer's (its own tenant) with one event waiting for it (delayed a day, so
nothing is sent), one in a hundred disabled. For each variant in turn, a
dispatcher (default options but the variant's) is started on it, until its
``/metrics`` names every endpoint; two scrapes warm it up, then ``--scrapes``
scrapes in a row are timed:

* series: the samples of one scrape, all of them and those of the metrics the
  documentation names (the contract's table), and of those the series of one
  endpoint (carrying its ``endpoint`` label);
* the scrape's wall time at the client, and the CPU time (user + system) it cost
  the dispatcher and PostgreSQL (the backlog query runs at each scrape), per
  scrape.

Variants: this tree with ``--histograms endpoint`` (the default) and with
``--histograms fleet``; with ``--baseline DIR``, first another checkout's
dispatcher with its defaults (``before``). Each figure is the median of
``--runs`` runs (a fresh dispatcher each), the variants taken in turn within a
run. The figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
import throughput  # the dispatcher's start and stop, CPU readers

import outbox
from outbox.migrate import migrate
from outbox.testing import TemporaryPostgres

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.contract import METRICS  # the documented names, kept once

HISTOGRAMS = {name for name, (kind, _) in METRICS.items() if kind == "histogram"}


def prepare(dsn: str, endpoints: int) -> None:
    """The endpoints, one waiting event each, one in a hundred disabled."""
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        conn.execute(
            "INSERT INTO outbox.endpoints (name, url, events, events_like, tenant) "
            "SELECT 'customer-' || i, 'http://127.0.0.1:9/c' || i, ARRAY['t.' || i], "
            "ARRAY['t.' || i], 'tenant-' || i FROM generate_series(0, %s) AS i",
            (endpoints - 1,))
        conn.execute("UPDATE outbox.endpoints SET enabled = false, disabled_by = 'operator', "
                     "disabled_reason = 'benchmark' WHERE id % 100 = 0")
        conn.commit()
        batch = [outbox.Event(f"t.{n}", {"n": n}, tenant=f"tenant-{n}",
                              delay=timedelta(days=1)) for n in range(endpoints)]
        for start in range(0, endpoints, 1000):
            outbox.publish_many(conn, batch[start:start + 1000])
            conn.commit()
        conn.execute("ANALYZE")
        conn.commit()


def family(sample: str) -> str:
    """The metric a sample line belongs to (a histogram's _bucket, _sum, _count: its own)."""
    name = sample.split("{", 1)[0].split(" ", 1)[0]
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name.removesuffix(suffix) in HISTOGRAMS:
            return name.removesuffix(suffix)
    return name


def count(text: str) -> dict[str, float]:
    """Series of one scrape: all, the documented metrics', per endpoint."""
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    named = [line for line in samples if family(line) in METRICS]
    per_endpoint = Counter(line.split('endpoint="', 1)[1].split('"', 1)[0]
                           for line in named if 'endpoint="' in line)
    every = Counter(line.split('endpoint="', 1)[1].split('"', 1)[0]
                    for line in samples if 'endpoint="' in line)
    return {"series": len(samples), "named": len(named),
            "per_endpoint": max(per_endpoint.values(), default=0),
            "every_per_endpoint": max(every.values(), default=0),
            "bytes": len(text.encode())}


def measure(dsn: str, datadir: Path, endpoints: int, scrapes: int, extra: list[str],
            tree: str | None) -> dict[str, float]:
    """Start a dispatcher, wait for every endpoint's series, time ``scrapes`` scrapes."""
    proc = throughput.start_dispatcher(dsn, *extra, tree=tree)
    argv = [str(arg) for arg in proc.args]
    url = f"http://127.0.0.1:{argv[argv.index('--metrics-port') + 1]}/metrics"
    try:
        with httpx.Client(trust_env=False, timeout=30) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    text = client.get(url).text
                except httpx.TransportError:
                    text = ""
                if text.count("outbox_delivered_total{") >= endpoints:
                    break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the dispatcher did not name every endpoint in 120 s")
                time.sleep(0.5)
            for _ in range(2):
                client.get(url)
            cpu, server = throughput.cpu_seconds(proc.pid), throughput.server_cpu(datadir)
            start = time.perf_counter()
            for _ in range(scrapes):
                text = client.get(url).text
            wall = time.perf_counter() - start
            cpu = throughput.cpu_seconds(proc.pid) - cpu
            server = throughput.server_cpu(datadir) - server
    finally:
        throughput.stop(proc)
    return {**count(text), "wall_ms": wall / scrapes * 1000, "cpu_ms": cpu / scrapes * 1000,
            "pg_cpu_ms": server / scrapes * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout (the release before): its dispatcher, defaults")
    args = parser.parse_args()
    variants: dict[str, tuple[list[str], str | None]] = {}
    if args.baseline:
        variants["before"] = ([], os.path.abspath(args.baseline))
    variants["endpoint"] = (["--histograms", "endpoint"], None)
    variants["fleet"] = (["--histograms", "fleet"], None)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs", flush=True)
    with TemporaryPostgres(fsync=True) as pg:
        prepare(pg.dsn, args.endpoints)
        for run in range(1, args.runs + 1):
            for name, (extra, tree) in variants.items():
                got = measure(pg.dsn, pg.datadir, args.endpoints, args.scrapes, extra, tree)
                results[name].append(got)
                print(f"run {run} {name:<8} {got['series']:7.0f} series "
                      f"({got['named']:.0f} documented, {got['per_endpoint']:.0f} per endpoint), "
                      f"{got['wall_ms']:6.1f} ms wall, {got['cpu_ms']:6.1f} ms CPU "
                      f"+ PostgreSQL {got['pg_cpu_ms']:5.1f} ms", flush=True)
    print()
    print(f"{'variant':<9} {'series':>8} {'documented':>10} {'/endpoint':>9} {'all/endp.':>9} "
          f"{'bytes':>9} {'wall ms':>8} {'CPU ms':>7} {'PG CPU ms':>9}")
    for name, rows in results.items():
        def med(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[key] for r in rows)
        print(f"{name:<9} {med('series'):8.0f} {med('named'):10.0f} {med('per_endpoint'):9.0f} "
              f"{med('every_per_endpoint'):9.0f} {med('bytes'):9.0f} {med('wall_ms'):8.1f} "
              f"{med('cpu_ms'):7.1f} {med('pg_cpu_ms'):9.1f}")


if __name__ == "__main__":
    main()
