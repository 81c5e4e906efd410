"""What a fleet of dispatchers costs and gives, each figure against a baseline in the same run.

    python benchmarks/fleet.py [--events 20000] [--max-in-flight 64] [--rounds 3]
                               [--idle-seconds 30] [--only-throughput]

One throwaway PostgreSQL (fsync on, data on disk), one lean local receiver.

1. **Throughput** with 1, 2, 4 and 8 dispatchers draining one backlog of
   ``--events`` unkeyed events to one endpoint, interleaved in every round.
   The endpoint's ``--max-in-flight`` (``--max-in-flight``, default 64, one
   dispatcher's default ``--concurrency``) is shared by the fleet, so every
   fleet size puts the same load on the receiver and the figures show what
   the fleet's coordination costs; with ``--max-in-flight 1000`` eight
   dispatchers keep 512 requests in flight on two cores.
   The backlog is published while the endpoint is paused; the dispatchers
   start and become ready; enabling the endpoint starts the race. Reported:
   events/s from first to last arrival, the dispatchers' CPU (user + system,
   from /proc) per event from the start signal on, and the database
   statements per event. The baseline is one dispatcher.
2. **The limits' cost on a claim**: the claim statement of this version
   (request slots, rate-limit turns, circuit) against the claim statement of
   schema version 1 (no fleet limits), 100 rows each, rolled back after
   every run, on the same table; and with ``--rate-limit`` set.
3. **Idle load**: 1 and 8 idle dispatchers for ``--idle-seconds``;
   statements per second per dispatcher, from pg_stat_database's committed
   transactions (every dispatcher statement is one, in autocommit), and
   their CPU.
4. **Key order's cost to producers**: one ``publish()`` per transaction,
   with a key (one advisory lock more) against without, interleaved;
   median microseconds per publish call and per whole transaction.

Prints medians of ``--rounds`` rounds; the figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import psycopg

import outbox
from outbox.migrate import migrate
from outbox.sql import queries
from outbox.testing import Receiver, Request, Response, TemporaryPostgres, free_port

TICKS = os.sysconf("SC_CLK_TCK")
FLEETS = (1, 2, 4, 8)

# The claim statement of schema version 1, before the fleet's limits: the baseline.
CLAIM_WITHOUT_LIMITS = """
WITH quota AS (
    SELECT q.endpoint_id, q.n
    FROM unnest(%(endpoint_ids)s::bigint[], %(limits)s::int[]) AS q(endpoint_id, n)
    JOIN outbox.endpoints e ON e.id = q.endpoint_id AND e.enabled AND e.removed_at IS NULL
),
locked AS MATERIALIZED (
    SELECT c.id FROM quota q
    CROSS JOIN LATERAL (
        SELECT d.id FROM outbox.deliveries d
        WHERE d.endpoint_id = q.endpoint_id AND d.state = 'pending'
          AND d.next_attempt_at <= now()
          AND (d.key IS NULL OR NOT EXISTS (
                SELECT 1 FROM outbox.deliveries p
                WHERE p.endpoint_id = d.endpoint_id AND p.key = d.key AND p.seq < d.seq
                  AND p.state IN ('pending', 'in_flight')))
        ORDER BY d.next_attempt_at LIMIT q.n
        FOR UPDATE OF d SKIP LOCKED
    ) c
),
claimed AS (
    UPDATE outbox.deliveries d
    SET state = 'in_flight', attempts = d.attempts + 1, lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
    WHERE d.id = ANY (ARRAY(SELECT id FROM locked))
    RETURNING d.id, d.endpoint_id, d.event_id, d.attempts, d.lease_token, d.seq
)
SELECT c.id, c.endpoint_id, c.attempts, c.lease_token, c.event_id, e.type, e.key,
       e.payload::text, e.headers::text, e.created_at
FROM claimed c JOIN outbox.events e ON e.id = c.event_id
ORDER BY c.endpoint_id, c.seq
"""


class Arrivals:
    """Counts arrivals, with the first and last times."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.first = self.last = 0.0

    def __call__(self, _: Request) -> Response:
        now = time.perf_counter()
        with self.lock:
            if self.count == 0:
                self.first = now
            self.count += 1
            self.last = now
        return Response(204)

    def reset(self) -> None:
        with self.lock:
            self.count, self.first, self.last = 0, 0.0, 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start(dsn: str) -> tuple[subprocess.Popen[bytes], int]:
    """A dispatcher process, and the port of its health server."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "--dsn", dsn, "--metrics-host", "127.0.0.1",
         "--metrics-port", str(port), "--log-level", "WARNING", "--retention", "0"],
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return proc, port


def stop(procs: list[subprocess.Popen[bytes]]) -> float:
    """Stop them; their CPU seconds, read just before."""
    used = sum(cpu_seconds(p.pid) for p in procs if p.poll() is None)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return used


def ready(procs: list[tuple[subprocess.Popen[bytes], int]]) -> None:
    """Wait until every dispatcher answers /readyz (started, endpoints loaded)."""
    deadline = time.monotonic() + 60
    for proc, port in procs:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("a dispatcher did not become ready")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                    break
            except OSError:
                time.sleep(0.05)


def drain(dsn: str, arrivals: Arrivals, events: int,
          dispatchers: int) -> tuple[float, float, float]:
    """events/s, CPU ms per event and statements per event of ``dispatchers`` processes
    draining a backlog.

    The backlog waits for a paused (disabled) endpoint while the dispatchers
    start and load; enabling it is the starting gun (it notifies them all),
    so that neither start-up nor publishing is counted in any figure.
    """
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE outbox.endpoints SET enabled = false WHERE name = 'bench'")
        for first in range(0, events, 5000):
            outbox.publish_many(conn, [outbox.Event("bench.event", {"n": i})
                                       for i in range(first, min(events, first + 5000))])
            conn.commit()
    arrivals.reset()
    started = [start(dsn) for _ in range(dispatchers)]
    procs = [proc for proc, _ in started]
    try:
        ready(started)
        with psycopg.connect(dsn, autocommit=True) as conn:
            before = committed(conn)
            cpu_before = sum(cpu_seconds(p.pid) for p in procs)
            conn.execute("UPDATE outbox.endpoints SET enabled = true WHERE name = 'bench'")
            conn.execute("SELECT pg_notify('outbox_endpoints', ''), "
                         "pg_notify('outbox_wakeup', '')")
        deadline = time.monotonic() + 600
        while arrivals.count < events:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{dispatchers} dispatchers delivered {arrivals.count} of "
                                   f"{events}; exit codes {[p.poll() for p in procs]}")
            time.sleep(0.02)
        time.sleep(0.2)  # the last results written
        cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_before
    finally:
        stop(procs)
    with psycopg.connect(dsn, autocommit=True) as conn:
        time.sleep(1.0)  # backends report their statistics as they exit
        statements = committed(conn) - before
    return ((arrivals.count - 1) / (arrivals.last - arrivals.first), cpu / events * 1000,
            statements / events)


def claim_ms(conn: psycopg.Connection[Any], text: Any, params: dict[str, Any],
             runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        with conn.transaction(force_rollback=True):
            rows = conn.execute(text, params).fetchall()
        times.append((time.perf_counter() - began) * 1000)
        assert len(rows) == 100, len(rows)
    return statistics.median(times)


def claim_costs(dsn: str, rounds: int) -> dict[str, float]:
    """Median ms per claim: without limits, with them, with a rate limit too."""
    # Here, not at the top: the release guard imports this module under older releases.
    from dispatcher.limits.quota import HELD_BYTES

    with psycopg.connect(dsn) as conn:
        row = conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight, events, "
                           "events_like) VALUES ('claims', 'http://127.0.0.1:9/', 100, "
                           "'{claims.*}', '{claims.%%}') RETURNING id").fetchone()
        assert row is not None
        endpoint = int(row[0])
        outbox.publish_many(conn, [outbox.Event("claims.event", {"n": i}) for i in range(300)])
        conn.commit()
        fleet = {"endpoint_ids": [endpoint], "requests": [100], "held": [0], "prefetch": [0],
                 "rows": [100], "floors": ["-infinity"], "ring_after": [None],
                 "ring_null": [False], "ring_steps": 128, "lease_seconds": 30, "horizon": 1000.0,
                 "pace": 1.05, "budget": HELD_BYTES}
        old = {"endpoint_ids": [endpoint], "limits": [100], "lease_seconds": 30}
        found: dict[str, list[float]] = {"without": [], "limits": [], "rate": []}
        for _ in range(rounds):
            found["without"].append(claim_ms(conn, CLAIM_WITHOUT_LIMITS, old))
            found["limits"].append(claim_ms(conn, queries["claim"], fleet))
            conn.execute("UPDATE outbox.endpoints SET rate_limit = 1000 WHERE id = %s",
                         (endpoint,))
            conn.commit()
            found["rate"].append(claim_ms(conn, queries["claim"], fleet))
            conn.execute("UPDATE outbox.endpoints SET rate_limit = NULL WHERE id = %s",
                         (endpoint,))
            conn.commit()
        conn.execute("DELETE FROM outbox.deliveries WHERE endpoint_id = %s", (endpoint,))
        conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE id = %s", (endpoint,))
        conn.commit()
    return {name: statistics.median(values) for name, values in found.items()}


def committed(conn: psycopg.Connection[Any]) -> int:
    """Transactions of this database so far (each dispatcher statement is one)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                       "WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


def idle_load(dsn: str, dispatchers: int, seconds: float) -> tuple[float, float]:
    """Statements/s and CPU ms/s per idle dispatcher."""
    started = [start(dsn) for _ in range(dispatchers)]
    procs = [proc for proc, _ in started]
    try:
        ready(started)
        time.sleep(3)  # past start-up
        with psycopg.connect(dsn, autocommit=True) as conn:
            before, cpu_before = committed(conn), [cpu_seconds(p.pid) for p in procs]
            time.sleep(seconds)
            after = committed(conn)
            cpu = sum(cpu_seconds(p.pid) for p in procs) - sum(cpu_before)
    finally:
        stop(procs)
    # Two of the counted transactions a second (at most) are this script's own reads.
    return (after - before - 2) / seconds / dispatchers, cpu / seconds / dispatchers * 1000


def publish_costs(dsn: str, transactions: int) -> dict[str, tuple[float, float]]:
    """Median us per publish() call and per transaction, without and with a key."""
    found: dict[str, tuple[list[float], list[float]]] = {"no key": ([], []), "key": ([], [])}
    with psycopg.connect(dsn) as conn:
        for n in range(transactions):
            for name, key in (("no key", None), ("key", f"customer-{n % 50}")):
                began = time.perf_counter()
                outbox.publish(conn, "bench.producer", {"n": n}, key=key)
                called = time.perf_counter()
                conn.commit()
                ended = time.perf_counter()
                found[name][0].append((called - began) * 1e6)
                found[name][1].append((ended - began) * 1e6)
    return {name: (statistics.median(c), statistics.median(t))
            for name, (c, t) in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--transactions", type=int, default=500)
    parser.add_argument("--only-throughput", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; endpoint --max-in-flight "
          f"{args.max_in_flight}", flush=True)
    arrivals = Arrivals()
    rates: dict[int, list[float]] = {n: [] for n in FLEETS}
    cpus: dict[int, list[float]] = {n: [] for n in FLEETS}
    statements: dict[int, list[float]] = {n: [] for n in FLEETS}
    with (TemporaryPostgres(fsync=True, tmpfs=False) as pg,
          Receiver(arrivals, record=False) as rx):
        with psycopg.connect(pg.dsn) as conn:
            migrate(conn)
            conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight, events, "
                         "events_like) VALUES ('bench', %s, %s, '{bench.*}', '{bench.%%}')",
                         (rx.url, args.max_in_flight))
            conn.commit()
        for round_no in range(1, args.rounds + 1):
            for n in FLEETS:
                rate, cpu, per_event = drain(pg.dsn, arrivals, args.events, n)
                rates[n].append(rate)
                cpus[n].append(cpu)
                statements[n].append(per_event)
            print(f"round {round_no}: " + "   ".join(
                f"{n}: {rates[n][-1]:6.0f} ev/s ({cpus[n][-1]:.3f} ms CPU, "
                f"{statements[n][-1]:.3f} statements per event)" for n in FLEETS), flush=True)
        print("\nthroughput (median of rounds; ratio to 1 dispatcher within each round)")
        for n in FLEETS:
            ratio = statistics.median(r / b for r, b in zip(rates[n], rates[1], strict=True))
            print(f"  {n} dispatchers  {statistics.median(rates[n]):7.0f} events/s  "
                  f"{ratio:4.2f}x  CPU {statistics.median(cpus[n]):.3f} ms/event  "
                  f"{statistics.median(statements[n]):.3f} statements/event")

        if args.only_throughput:
            return
        costs = claim_costs(pg.dsn, args.rounds)
        print("\nclaim of 100 rows (median ms)")
        for name, label in (("without", "version 1, no fleet limits"),
                            ("limits", "slots and circuit"), ("rate", "slots, circuit, rate")):
            print(f"  {label:28} {costs[name]:6.2f} ms  "
                  f"{costs[name] / costs['without']:4.2f}x")

        print("\nidle dispatchers")
        for n in (1, 8):
            statements, cpu = idle_load(pg.dsn, n, args.idle_seconds)
            print(f"  {n} idle: {statements:5.2f} statements/s and {cpu:5.2f} ms CPU/s "
                  "per dispatcher")

        producer = publish_costs(pg.dsn, args.transactions)
        print("\npublish() in its own transaction (median us: the call / call + commit)")
        for name, (call, whole) in producer.items():
            print(f"  {name:7} {call:7.0f} / {whole:7.0f}")
        base_call = producer["no key"][0]
        print(f"  a key adds {producer['key'][0] - base_call:.0f} us to the call "
              f"({producer['key'][0] / base_call:.2f}x)")


if __name__ == "__main__":
    main()
