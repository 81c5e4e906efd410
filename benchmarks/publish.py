"""What publishing costs a producer's transaction, against a bare INSERT baseline.

    python benchmarks/publish.py [--repetitions 7] [--transactions 200] [--batches 10]
                                 [--tmpfs] [--tenant-endpoints N]

Starts its own throwaway PostgreSQL with fsync on and its data directory on
disk (``--tmpfs`` puts it in /dev/shm instead), creates one endpoint
subscribed to every event type, and measures in one run, variants
interleaved block by block so that table growth and machine noise fall on
all of them alike:

- ``publish``: a transaction doing one ``outbox.publish()`` and committing;
- ``publish, bounded``: the same for an endpoint with a ``--max-pending``
  bound (far from reached), which publish checks and counts;
- ``bare insert``: a transaction inserting a comparable row (same columns,
  same serialisation, a uuid7 primary key) into a plain table and committing;
- the same two statements' time without the commit;
- ``publish, in a span`` (with ``--span``, OpenTelemetry's SDK installed):
  the same publish inside a recording span, which keeps its traceparent
  with the event; the other variants then run with OpenTelemetry's API
  imported and no span current;
- ``publish_many`` of 1,000 events per call (with its commit), against a
  bare 1,000-row ``INSERT ... SELECT FROM unnest`` into the plain table
  (the usual way of sending a batch: arrays adapted by the driver).

With ``--tenant-endpoints N`` there are also N endpoints subscribed to
``mail.*`` that belong to tenants ``t0`` ... ``tN-1``, and every event is
published with tenant ``t0``: each goes to the sink and to t0's endpoint,
and publish must pass over the N - 1 others (the A/B of 1 and 10,000).

Wall times suffer from anything else running on the machine; the CPU time of
this process and of its server backend does not, so both are reported.

Medians are reported; targets: publish at most 1.5x the bare insert, and
publish_many at least 20,000 events/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

import outbox
from outbox._event import uuid7
from outbox.migrate import migrate
from outbox.testing import TemporaryPostgres

BASELINE_TABLE = """
CREATE TABLE plain_events (
    id               uuid PRIMARY KEY,
    type             text NOT NULL,
    key              text,
    payload          json NOT NULL,
    headers          jsonb NOT NULL DEFAULT '{}',
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
BARE_INSERT = """
INSERT INTO plain_events (id, type, key, payload, headers)
VALUES (%(id)s, %(type)s, %(key)s, %(payload)s::json, %(headers)s::jsonb)
"""
BARE_INSERT_MANY = """
INSERT INTO plain_events (id, type, key, payload, headers)
SELECT * FROM unnest(%(ids)s::uuid[], %(types)s::text[], %(keys)s::text[],
                     %(payloads)s::json[], %(headers)s::jsonb[])
"""
PAYLOAD = {"message_id": 42, "thread": "thread-7", "subject": "Quarterly report",
           "from": "alice@example.com", "size": 18234}
BATCH = 1000


def _payload(i: int) -> dict[str, Any]:
    return {**PAYLOAD, "message_id": i}


def _publish_one(conn: psycopg.Connection[Any], i: int, type_: str) -> tuple[float, float]:
    start = time.perf_counter()
    outbox.publish(conn, type_, _payload(i), key=f"thread-{i % 50}", tenant=TENANT)
    statement = time.perf_counter()
    conn.commit()
    return time.perf_counter() - start, statement - start


def bench_publish(conn: psycopg.Connection[Any], i: int) -> tuple[float, float]:
    return _publish_one(conn, i, "mail.received")  # to the unbounded endpoint


def bench_publish_in_span(conn: psycopg.Connection[Any], i: int) -> tuple[float, float]:
    with TRACER.start_as_current_span("request"):  # opened outside the measured time
        return _publish_one(conn, i, "mail.received")


TRACER: Any = None
TENANT: str | None = None  # the events' tenant (--tenant-endpoints)


def bench_publish_bounded(conn: psycopg.Connection[Any], i: int) -> tuple[float, float]:
    return _publish_one(conn, i, "order.received")  # to the bounded endpoint


def bench_bare(conn: psycopg.Connection[Any], i: int) -> tuple[float, float]:
    start = time.perf_counter()
    params = {"id": uuid7(), "type": "mail.received", "key": f"thread-{i % 50}",
              "payload": json.dumps(_payload(i), separators=(",", ":")), "headers": "{}"}
    conn.execute(BARE_INSERT, params)
    statement = time.perf_counter()
    conn.commit()
    return time.perf_counter() - start, statement - start


def bench_publish_many(conn: psycopg.Connection[Any], i: int) -> tuple[float, float]:
    start = time.perf_counter()
    outbox.publish_many(conn, [
        outbox.Event("mail.received", _payload(i + n), key=f"thread-{n % 50}", tenant=TENANT)
        for n in range(BATCH)])
    statement = time.perf_counter()
    conn.commit()
    return time.perf_counter() - start, statement - start


def bench_bare_many(conn: psycopg.Connection[Any], i: int) -> tuple[float, float]:
    start = time.perf_counter()
    params = {
        "ids": [uuid7() for _ in range(BATCH)],
        "types": ["mail.received"] * BATCH,
        "keys": [f"thread-{n % 50}" for n in range(BATCH)],
        "payloads": [json.dumps(_payload(i + n), separators=(",", ":")) for n in range(BATCH)],
        "headers": ["{}"] * BATCH,
    }
    conn.execute(BARE_INSERT_MANY, params)
    statement = time.perf_counter()
    conn.commit()
    return time.perf_counter() - start, statement - start


Variant = Callable[[psycopg.Connection[Any], int], tuple[float, float]]


@dataclass
class Timings:
    """Per call: wall time with and without the commit; CPU of this process and the backend."""

    totals: list[float] = field(default_factory=list)
    statements: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by the server process ``pid`` (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(variants: dict[str, Variant], conn: psycopg.Connection[Any], *,
        repetitions: int, per_block: int, warmup: int) -> dict[str, Timings]:
    """Run each variant in blocks of ``per_block``, interleaved in a shuffled order.

    CPU time is read per block (the kernel counts in 10 ms ticks) and shared
    out over its calls: unlike wall time, it does not grow when other work
    competes for the cores.
    """
    results = {name: Timings() for name in variants}
    pid = conn.info.backend_pid
    counter = 0
    for variant in variants.values():  # warm up caches and psycopg's prepared statements
        for _ in range(warmup):
            counter += 1
            variant(conn, counter)
    order = list(variants)
    for _ in range(repetitions):
        random.shuffle(order)
        for name in order:
            timings = results[name]
            client, server = time.process_time(), backend_cpu(pid)
            for _ in range(per_block):
                counter += 1
                total, statement = variants[name](conn, counter)
                timings.totals.append(total)
                timings.statements.append(statement)
            timings.client_cpu.append((time.process_time() - client) / per_block)
            timings.server_cpu.append((backend_cpu(pid) - server) / per_block)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=7,
                        help="interleaved rounds over all variants (default 7)")
    parser.add_argument("--transactions", type=int, default=200,
                        help="single-event transactions per variant per round (default 200)")
    parser.add_argument("--batches", type=int, default=10,
                        help="1,000-event calls per variant per round (default 10)")
    parser.add_argument("--tmpfs", action="store_true",
                        help="keep the data directory in /dev/shm (fsync then costs nothing)")
    parser.add_argument("--span", action="store_true",
                        help="also publish inside an OpenTelemetry span (needs opentelemetry-sdk)")
    parser.add_argument("--tenant-endpoints", type=int, default=0, metavar="N",
                        help="also N endpoints of tenants t0..tN-1; events are t0's")
    args = parser.parse_args(argv)
    singles: dict[str, Variant] = {"publish": bench_publish,
                                   "publish, bounded": bench_publish_bounded,
                                   "bare insert": bench_bare}
    if args.span:
        global TRACER  # noqa: PLW0603 - set once, before any measurement
        from opentelemetry.sdk.trace import TracerProvider

        TRACER = TracerProvider().get_tracer("bench")
        singles["publish, in a span"] = bench_publish_in_span

    with TemporaryPostgres(fsync=True, tmpfs=args.tmpfs) as server:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE bench")
        with psycopg.connect(server.dsn_for("bench")) as conn:
            migrate(conn)
            conn.execute(BASELINE_TABLE)
            conn.execute("INSERT INTO outbox.endpoints (name, url, events, events_like) "
                         "VALUES ('sink', 'http://127.0.0.1:9/', '{mail.*}', '{mail.%}')")
            conn.execute("INSERT INTO outbox.endpoints (name, url, events, events_like, "
                         "max_pending) VALUES ('bounded', 'http://127.0.0.1:9/', "
                         "'{order.*}', '{order.%}', 1000000000)")
            if args.tenant_endpoints:
                global TENANT  # noqa: PLW0603 - set once, before any measurement
                TENANT = "t0"
                conn.execute("INSERT INTO outbox.endpoints (name, url, events, events_like, "
                             "tenant) SELECT 'tenant-' || n, 'http://127.0.0.1:9/', "
                             "'{mail.*}', '{mail.%%}', 't' || n "
                             "FROM generate_series(0, %s - 1) AS n", (args.tenant_endpoints,))
                conn.execute("ANALYZE outbox.endpoints")
            conn.commit()
            version = conn.execute("SHOW server_version").fetchone()
            fsync = conn.execute("SHOW fsync").fetchone()
            single = run(singles, conn,
                         repetitions=args.repetitions, per_block=args.transactions,
                         warmup=20)
            many = run({"publish_many": bench_publish_many, "bare insert many": bench_bare_many},
                       conn, repetitions=args.repetitions, per_block=args.batches, warmup=2)
    report(single, many, server_version=str(version[0] if version else "?"),
           fsync=str(fsync[0] if fsync else "?"), data_dir=str(server.base), args=args)
    return 0


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def report(single: dict[str, Timings], many: dict[str, Timings], *, server_version: str,
           fsync: str, data_dir: str, args: argparse.Namespace) -> None:
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, psycopg {psycopg.__version__} "
          f"({psycopg.pq.__impl__}), PostgreSQL {server_version}, fsync={fsync}, "
          f"data in {os.path.dirname(data_dir)}")
    print(f"rounds: {args.repetitions}, {args.transactions} transactions and "
          f"{args.batches} batches of {BATCH} per variant per round; load average at the "
          f"end {os.getloadavg()[0]:.2f} (other work on the machine skews wall times)\n")
    print(f"{'one event per transaction':<26}{'wall (ms)':>11}{'statement':>11}"
          f"{'CPU client + server (ms)':>27}")
    for name, t in single.items():
        print(f"  {name:<24}{_ms(t.totals):>11.3f}{_ms(t.statements):>11.3f}"
              f"{_ms(t.client_cpu):>17.3f} + {_ms(t.server_cpu):.3f}")
    pub, bare = single["publish"], single["bare insert"]
    ratio = _ms(pub.totals) / _ms(bare.totals)
    print(f"  {'ratio publish / bare':<24}{ratio:>10.2f}x"
          f"{_ms(pub.statements) / _ms(bare.statements):>10.2f}x"
          f"   target <= 1.5x per transaction: {'met' if ratio <= 1.5 else 'MISSED'}")
    bounded = single["publish, bounded"]
    print(f"  {'ratio bounded / publish':<24}"
          f"{_ms(bounded.totals) / _ms(pub.totals):>10.2f}x"
          f"{_ms(bounded.statements) / _ms(pub.statements):>10.2f}x")
    if "publish, in a span" in single:
        spanned = single["publish, in a span"]
        print(f"  {'ratio in a span / publish':<24}"
              f"{_ms(spanned.totals) / _ms(pub.totals):>10.2f}x"
              f"{_ms(spanned.statements) / _ms(pub.statements):>10.2f}x"
              f"   client CPU +{(_ms(spanned.client_cpu) - _ms(pub.client_cpu)) * 1000:.0f} us")
    print()
    print(f"{'1,000 events per call':<26}{'wall (ms)':>11}{'events/s':>11}"
          f"{'CPU client + server (ms)':>27}{'events/CPU-s':>14}")
    for name, t in many.items():
        cpu = _ms(t.client_cpu) + _ms(t.server_cpu)
        print(f"  {name:<24}{_ms(t.totals):>11.1f}{BATCH / statistics.median(t.totals):>11,.0f}"
              f"{_ms(t.client_cpu):>17.1f} + {_ms(t.server_cpu):<7.1f}{BATCH * 1000 / cpu:>14,.0f}")
    if args.tenant_endpoints:
        print(f"  ({args.tenant_endpoints} tenant endpoints; events of tenant t0)")
    rate = BATCH / statistics.median(many["publish_many"].totals)
    print(f"  target: publish_many >= 20,000 events/s: {'met' if rate >= 20000 else 'MISSED'}"
          " (events/CPU-s: the rate when client and server each get their core)")


if __name__ == "__main__":
    sys.exit(main())
