"""The web view at scale: how fast its pages answer on a large queue table.

    python benchmarks/web.py [--finished 10000000] [--pending 1000000] [--dead 100000]
                             [--rounds 3] [--requests 20]

One throwaway PostgreSQL (fsync on, data on disk), four endpoints, and the
table written in bulk with SQL (then vacuumed and analysed, as autovacuum
would): ``--finished`` finished deliveries with their events, ``--dead`` of
them dead letters (an error, two attempts, dead-lettered over the last
week), and ``--pending`` more pending. ``outbox web`` runs as a real
process on 127.0.0.1, and each page is asked for over HTTP, ``--requests``
times a round, ``--rounds`` rounds; the figure is the median of the rounds'
medians (milliseconds, client-timed: the whole request).

Besides the pages, the cost behind the overview's cache: the counts
``outbox status`` reads, timed on a connection of their own (what the first
visitor after a quiet minute waits for, and what the cache refreshes behind
the page). And whether the view gets in the way of the queue: ``publish()``
of one event, timed alone and while the counts run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import psycopg

import outbox
from outbox import admin
from outbox.migrate import migrate
from outbox.testing import TemporaryPostgres
from outbox.web.params import page_mark

ENDPOINTS = ("billing", "crm", "mail", "search")


def grow(dsn: str, finished: int, pending: int, dead: int) -> float:
    """Bulk rows spread over the endpoints; seconds."""
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for state, count, age in (("delivered", finished - dead, "2 days"),
                                  ("dead", dead, "3 days"), ("pending", pending, "0")):
            for first in range(0, count, 1_000_000):
                n = min(1_000_000, count - first)
                conn.execute(
                    "WITH ev AS (INSERT INTO outbox.events (id, type, key, payload, created_at, "
                    "deliver_after, idempotency_key) "
                    "SELECT gen_random_uuid(), 'bench.' || (i %% 7), 'customer-' || (i %% 50000), "
                    "'{\"n\": 1}', now() - %(age)s::interval + make_interval(secs => i %% 86400), "
                    "now(), CASE WHEN i %% 10 = 0 THEN %(state)s || '-' || (%(first)s + i) END "
                    "FROM generate_series(1, %(n)s) AS i "
                    "RETURNING id, seq, key, created_at) "
                    "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, state, "
                    "attempts, next_attempt_at, created_at, finished_at, last_error, "
                    "last_status) "
                    "SELECT id, 1 + seq %% 4, seq, key, %(state)s, "
                    "CASE %(state)s WHEN 'pending' THEN 0 WHEN 'dead' THEN 2 ELSE 1 END, "
                    "now() + interval '1 hour', created_at, "
                    "CASE WHEN %(state)s <> 'pending' "
                    "     THEN created_at + make_interval(secs => seq %% 600000) END, "
                    "CASE WHEN %(state)s = 'dead' THEN 'HTTP 503 from receiver' END, "
                    "CASE WHEN %(state)s = 'dead' THEN 503 END FROM ev",
                    {"age": age, "n": n, "state": state, "first": first})
                print(f"  {first + n:>11,} {state}", flush=True)
        conn.execute("VACUUM ANALYZE outbox.deliveries")
        conn.execute("VACUUM ANALYZE outbox.events")
    return time.perf_counter() - start


def prepare(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        for name in ENDPOINTS:
            conn.execute("INSERT INTO outbox.endpoints (name, url) VALUES (%s, %s)",
                         (name, f"http://127.0.0.1:9/{name}"))
        conn.commit()


def start_view(dsn: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "outbox", "--dsn", dsn, "web", "--listen",
                             "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving " not in line:
        proc.kill()
        raise SystemExit(f"outbox web did not start: {line!r}")
    return proc, line.split("serving ", 1)[1].split()[0].rstrip("/")


def timed_get(client: httpx.Client, path: str, requests: int) -> float:
    """Median ms of ``requests`` GETs of ``path`` (each must answer 200 or 303)."""
    took = []
    for _ in range(requests):
        start = time.perf_counter()
        response = client.get(path)
        took.append((time.perf_counter() - start) * 1000)
        assert response.status_code in (200, 303), (path, response.status_code, response.text)
    return statistics.median(took)


def counts(dsn: str) -> float:
    """Ms of what the overview's cache computes: status, horizon, key waits."""
    with psycopg.connect(dsn, autocommit=True, options="-c jit=off") as conn:
        start = time.perf_counter()
        admin.status(conn)
        admin.horizon(conn)
        admin.key_waits(conn)
        return (time.perf_counter() - start) * 1000


def publish_ms(dsn: str, n: int = 30) -> float:
    """Median ms of publish() of one event and its commit."""
    took = []
    with psycopg.connect(dsn) as conn:
        for i in range(n):
            start = time.perf_counter()
            outbox.publish(conn, "bench.alongside", {"n": i})
            conn.commit()
            took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took)


def beside_counts(dsn: str) -> tuple[float, float, float]:
    """publish() alone, and while the counts run in another session; the counts' ms."""
    alone = publish_ms(dsn)
    result: dict[str, float] = {}
    counting = threading.Thread(target=lambda: result.update(ms=counts(dsn)))
    counting.start()
    time.sleep(0.05)
    during = publish_ms(dsn, n=10)
    counting.join()
    return alone, during, result["ms"]


def pages(dsn: str, sample: dict[str, Any]) -> dict[str, str]:
    """The addresses timed: each page, its JSON, filters, a deep page, the searches."""
    event, key, idem = sample["event"], sample["key"], sample["idempotency_key"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        letters = admin.dead_letters(conn, limit=1, before=None)
        for _ in range(5):  # five pages down, through the keyset
            letters = admin.dead_letters(conn, limit=50, before=letters[-1].after)
    deep = f"/dead?before={page_mark(letters[-1])}"
    return {
        "overview": "/", "overview, JSON": "/?format=json",
        "dead letters": "/dead", "dead letters, JSON": "/dead?format=json",
        "dead letters of one endpoint": "/dead?endpoint=billing",
        "dead letters of one type": "/dead?type=bench.3",
        "dead letters, filters nothing matches": "/dead?type=bench.3&since=1h",
        "dead letters, a page 250 deep": deep,
        "an event": f"/events/{event}",
        "search: event id": f"/search?q={event}",
        "search: idempotency key": f"/search?q={idem}",
        "search: ordering key": f"/search?q={key}",
    }


def sample_rows(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT d.event_id::text, ev.key, (SELECT idempotency_key FROM outbox.events "
            "WHERE idempotency_key LIKE 'dead-%%' LIMIT 1) FROM outbox.deliveries d "
            "JOIN outbox.events ev ON ev.id = d.event_id WHERE d.state = 'dead' "
            "ORDER BY d.finished_at DESC LIMIT 1").fetchone()
    assert row is not None
    return {"event": row[0], "key": row[1], "idempotency_key": row[2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with TemporaryPostgres(fsync=True, tmpfs=False) as pg:
        prepare(pg.dsn)
        took = grow(pg.dsn, args.finished, args.pending, args.dead)
        print(f"{args.finished:,} finished ({args.dead:,} dead) and {args.pending:,} pending "
              f"written and vacuumed in {took:.0f} s", flush=True)
        addresses = pages(pg.dsn, sample_rows(pg.dsn))
        proc, url = start_view(pg.dsn)
        rounds: dict[str, list[float]] = {name: [] for name in addresses}
        first_overview = 0.0
        try:
            with httpx.Client(base_url=url, trust_env=False, timeout=60) as client:
                start = time.perf_counter()
                client.get("/")
                first_overview = (time.perf_counter() - start) * 1000
                for round_no in range(1, args.rounds + 1):
                    for name, path in addresses.items():
                        rounds[name].append(timed_get(client, path, args.requests))
                    print(f"round {round_no}: " + ", ".join(
                        f"{name} {ms[-1]:.1f}" for name, ms in rounds.items()), flush=True)
        finally:
            proc.terminate()
            proc.wait(20)
        count_ms = [counts(pg.dsn) for _ in range(args.rounds)]
        alone, during, count_during = beside_counts(pg.dsn)
    print("\n| page | median ms |\n| --- | ---: |")
    for name, ms in rounds.items():
        print(f"| {name} | {statistics.median(ms):.1f} |")
    print(f"\nfirst overview after start (waits for the counts): {first_overview:.0f} ms")
    print(f"the counts behind the overview's cache: {statistics.median(count_ms):.0f} ms "
          f"(rounds: {', '.join(f'{ms:.0f}' for ms in count_ms)})")
    print(f"publish() of one event: {alone:.2f} ms alone, {during:.2f} ms while the counts "
          f"ran ({count_during:.0f} ms)")


if __name__ == "__main__":
    main()
