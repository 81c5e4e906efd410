"""Delivery while another connection holds a snapshot open (a pinned MVCC horizon).

    python benchmarks/horizon.py [--warmup 20] [--hold 300] [--after 30] [--rate N]
                                 [--rounds 1] [--dispatcher-args "..."]

One throwaway PostgreSQL (fsync on), one lean local receiver, one endpoint,
one dispatcher (a subprocess, default options). A publisher process commits
one event per transaction, as fast as it can (or ``--rate`` a second), each
carrying the time it was published; the receiver reads it on arrival. After
``--warmup`` seconds another connection opens a REPEATABLE READ transaction,
reads ``outbox.deliveries`` once and keeps it open ``--hold`` seconds (what
an analytics query, ``pg_dump`` or a connection left idle in transaction
does): while it lives, no vacuum may remove a version it could still see,
so every claimed and finished row stays behind in the structures a claim
scans (the tables are analyzed just before: the warm-up grows them from
empty faster than autovacuum looks). Then it ends, and the run goes on
``--after`` seconds.

Per phase (before: the warmup after its first 5 s; during: the hold;
after): published/s, delivered/s (arrivals), publish-to-arrival p50/p99 of
the events arriving in the phase, the dispatcher's CPU per delivered event
and PostgreSQL's (the server's processes, from /proc: the postmaster, its
children and the children it reaped) beside it; delivered/published over
the hold, and the events published but not yet arrived when it ends (the
backlog). Medians of ``--rounds`` rounds, each on a fresh database.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
import throughput  # the shared CPU reader, percentile and dispatcher start/stop

import outbox
from outbox.migrate import migrate
from outbox.testing import Receiver, Request, Response, TemporaryPostgres

PHASES = ("before", "during", "after")


server_cpu = throughput.server_cpu


class Arrivals:
    """Arrival times and publish-to-arrival latencies, as the receiver sees them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.samples: list[tuple[float, float]] = []  # (arrived, latency)

    def __call__(self, request: Request) -> Response:
        body: Any = json.loads(request.body)
        data = body.get("data", body) if isinstance(body, dict) else {}
        at = data.get("at") if isinstance(data, dict) else None
        if isinstance(at, float):
            with self.lock:
                self.samples.append((request.received_at, request.received_at - at))
        return Response(204)

    def count(self) -> int:
        with self.lock:
            return len(self.samples)


def publisher(dsn: str, rate: float, published: Any, stopping: Any) -> None:
    """One event per transaction until told to stop; ``published`` counts the commits."""
    with psycopg.connect(dsn) as conn:
        started = time.monotonic()
        n = 0
        while not stopping.is_set():
            if rate:
                wait = started + n / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            outbox.publish(conn, "bench.event", {"at": time.time()})
            conn.commit()
            n += 1
            published.value = n


@dataclass
class Mark:
    """What the counters said at a phase boundary."""
    at: float
    published: int
    delivered: int
    dispatcher_cpu: float
    server_cpu: float


@dataclass
class Phase:
    seconds: float
    published: float
    delivered: float
    p50: float
    p99: float
    dispatcher_ms: float  # CPU per delivered event
    server_ms: float
    extra: dict[str, float] = field(default_factory=dict)


def phase(start: Mark, end: Mark, arrivals: Arrivals) -> Phase:
    seconds = end.at - start.at
    delivered = end.delivered - start.delivered
    with arrivals.lock:
        latencies = [lat for arrived, lat in arrivals.samples if start.at <= arrived < end.at]
    per = 1000 / max(delivered, 1)
    return Phase(seconds, (end.published - start.published) / seconds, delivered / seconds,
                 throughput.pct(latencies, 0.5) if latencies else float("nan"),
                 throughput.pct(latencies, 0.99) if latencies else float("nan"),
                 (end.dispatcher_cpu - start.dispatcher_cpu) * per,
                 (end.server_cpu - start.server_cpu) * per)


def one_round(args: argparse.Namespace) -> dict[str, Phase]:
    arrivals = Arrivals()
    with (TemporaryPostgres(fsync=True) as pg, Receiver(arrivals, record=False) as rx):
        with psycopg.connect(pg.dsn) as conn:
            migrate(conn)
            conn.execute("INSERT INTO outbox.endpoints (name, url, events, events_like) "
                         "VALUES ('bench', %s, '{*}', '{%%}')", (rx.url,))
            conn.commit()
        proc = throughput.start_dispatcher(pg.dsn, *args.dispatcher_args.split())
        spawn = multiprocessing.get_context("spawn")  # not fork: the receiver runs a thread
        published = spawn.Value("q", 0, lock=False)
        stopping = spawn.Event()
        writer = spawn.Process(target=publisher,
                                         args=(pg.dsn, args.rate, published, stopping))

        def mark() -> Mark:
            return Mark(time.time(), published.value, arrivals.count(),
                        throughput.cpu_seconds(proc.pid), server_cpu(pg.datadir))

        def wait(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError("the dispatcher exited")
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

        writer.start()
        try:
            wait(min(5.0, args.warmup / 2))
            start = mark()
            wait(args.warmup - min(5.0, args.warmup / 2))
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                # Statistics of a table that has lived: the warm-up grew it from
                # empty faster than autovacuum (a minute's nap) looks at it.
                conn.execute("ANALYZE outbox.deliveries, outbox.events")
            pinned = psycopg.connect(pg.dsn)
            pinned.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            pinned.execute("SELECT count(*) FROM outbox.deliveries").fetchone()
            held = mark()
            wait(args.hold)
            released = mark()
            pinned.rollback()
            pinned.close()
            wait(args.after)
            end = mark()
        finally:
            stopping.set()
            writer.join(timeout=30)
            throughput.stop(proc)
    phases = {"before": phase(start, held, arrivals), "during": phase(held, released, arrivals),
              "after": phase(released, end, arrivals)}
    during = phases["during"]
    during.extra["ratio"] = during.delivered / max(during.published, 1e-9)
    during.extra["backlog"] = released.published - released.delivered
    return phases


def median(rounds: list[dict[str, Phase]], name: str, attr: str) -> float:
    return statistics.median(getattr(r[name], attr) for r in rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=float, default=20.0,
                        help="seconds of steady publishing before the snapshot (default 20)")
    parser.add_argument("--hold", type=float, default=300.0,
                        help="seconds the snapshot is held (default 300)")
    parser.add_argument("--after", type=float, default=30.0,
                        help="seconds measured after it ends (default 30)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="events a second the publisher commits (default 0: as fast as "
                        "it can)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dispatcher-args", default="", help="extra flags, space-separated")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rounds: list[dict[str, Phase]] = []
    for round_no in range(1, args.rounds + 1):
        rounds.append(one_round(args))
        during = rounds[-1]["during"]
        print(f"round {round_no}: during the hold delivered/published "
              f"{during.extra['ratio']:.1%}, p99 {during.p99 * 1000:.0f} ms, "
              f"backlog {during.extra['backlog']:.0f}", flush=True)
    print(f"\nmedians of {len(rounds)} round(s); hold {args.hold:.0f} s, "
          f"rate {'as fast as one publisher commits' if not args.rate else args.rate}")
    print(f"{'phase':<8} {'s':>5} {'published/s':>12} {'delivered/s':>12} {'p50 ms':>9} "
          f"{'p99 ms':>9} {'dispatcher ms/ev':>17} {'postgres ms/ev':>15}")
    for name in PHASES:
        print(f"{name:<8} {median(rounds, name, 'seconds'):5.0f} "
              f"{median(rounds, name, 'published'):12.0f} "
              f"{median(rounds, name, 'delivered'):12.0f} "
              f"{median(rounds, name, 'p50') * 1000:9.1f} "
              f"{median(rounds, name, 'p99') * 1000:9.1f} "
              f"{median(rounds, name, 'dispatcher_ms'):17.3f} "
              f"{median(rounds, name, 'server_ms'):15.3f}")
    ratio = statistics.median(r["during"].extra["ratio"] for r in rounds)
    backlog = statistics.median(r["during"].extra["backlog"] for r in rounds)
    print(f"during the hold: delivered/published {ratio:.1%}; "
          f"backlog when it ended {backlog:.0f} events")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
