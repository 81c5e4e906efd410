"""Helpers for the resilience tests: dispatchers as real subprocesses, and scripted receivers.

A :class:`DispatcherProcess` is ``python -m dispatcher`` with short timings, its
log in a file (a pipe nobody reads would fill up and stall it), its health
server on a free port. The tests kill, freeze and restart these processes and
the PostgreSQL cluster, then check the database and what the receiver saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox._postgres.cluster import free_port
from outbox.testing import Receiver
from outbox.testing._receiver import Request, Response
from tests.support.cli import clean_environment
from tests.support.dispatcher import wait_until


def holds_for(predicate: Callable[[], bool], seconds: float, what: str,
              interval: float = 0.1) -> None:
    """Check that ``predicate`` holds at every sample over a window (an outage, say)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what} stopped holding"
        time.sleep(interval)


class DispatcherProcess:
    """One ``python -m dispatcher`` subprocess with its health server and log file."""

    def __init__(self, dsn: str, *args: str, lease: float = 3, poll_interval: float = 0.2,
                 name: str = "dispatcher", env: Mapping[str, str] | None = None) -> None:
        """``env``: variables added to a clean environment (no PG*, OUTBOX_*)."""
        self.port = free_port()
        self.name = name
        fd, path = tempfile.mkstemp(prefix=f"outbox-{name}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)
        self._log = self.log_path.open("wb")
        command = [sys.executable, "-m", "dispatcher", "--dsn", dsn,
                   "--metrics-host", "127.0.0.1", "--metrics-port", str(self.port),
                   "--poll-interval", str(poll_interval), "--lease", str(lease), *args]
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=clean_environment(env))

    # -- the health server ---------------------------------------------------------

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of ``GET path``; (0, error) when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=3) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def status(self, path: str) -> int:
        return self.get(path)[0]

    def wait_status(self, path: str, status: int, timeout: float = 15.0) -> None:
        wait_until(lambda: self.status(path) == status, timeout,
                   f"{self.name} {path} to answer {status}")

    def metric(self, name: str) -> float:
        """Sum of all samples of a metric on /metrics (0 when absent)."""
        code, body = self.get("/metrics")
        assert code == 200, f"{self.name} /metrics answered {code}: {body}"
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$")
        return sum(float(m.group(2)) for line in body.splitlines()
                   if (m := pattern.match(line)))

    # -- the process -----------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 15.0) -> None:
        wait_until(lambda: text in self.log(), timeout, f"{self.name} to log {text!r}")

    def kill(self) -> None:
        """SIGKILL (also a stopped process) and reap; safe to call twice."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def close(self) -> None:
        self.kill()
        self._log.close()
        self.log_path.unlink(missing_ok=True)


class Fleet:
    """Every dispatcher a test started, so that teardown kills them all and shows their logs."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.started: list[DispatcherProcess] = []

    def start(self, *args: str, dsn: str | None = None, **options: Any) -> DispatcherProcess:
        """A new dispatcher on the test's database (or on ``dsn``: through a proxy, say)."""
        name = f"dispatcher-{len(self.started) + 1}"
        process = DispatcherProcess(dsn or self.dsn, *args, name=name, **options)
        self.started.append(process)
        return process

    def close(self) -> None:
        for process in self.started:
            process.kill()
            tail = process.log()[-3000:]
            print(f"--- {process.name} (exit {process.proc.returncode}) ---\n{tail}")
            process.close()


def add_endpoint(dsn: str, url: str, name: str = "sink", **columns: Any) -> int:
    """Insert an endpoint with fast test timings (overridable by column name); its id."""
    values: dict[str, Any] = {"timeout_seconds": 5.0, "min_backoff_seconds": 0.05,
                              "max_backoff_seconds": 0.2, "max_in_flight": 16,
                              "max_attempts": 10, **columns, "name": name, "url": url}
    query = sql.SQL("INSERT INTO outbox.endpoints ({}) VALUES ({}) RETURNING id").format(
        sql.SQL(", ").join(map(sql.Identifier, values)),
        sql.SQL(", ").join(map(sql.Placeholder, values)))
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, values).fetchone()
    assert row is not None
    return int(row[0])


def publish(dsn: str, count: int, per_transaction: int = 100,
            type_: str = "test.resilience") -> list[str]:
    """Publish ``count`` events in committed transactions; their ids as strings."""
    ids: list[str] = []
    with psycopg.connect(dsn) as conn:
        for start in range(0, count, per_transaction):
            size = min(per_transaction, count - start)
            with conn.transaction():
                batch = outbox.publish_many(
                    conn, [outbox.Event(type_, {"n": start + i}) for i in range(size)])
            ids += [str(i) for i in batch]
    return ids


def states(dsn: str) -> Counter[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT state, count(*) FROM outbox.deliveries GROUP BY state")
        return Counter({state: int(n) for state, n in rows})


def all_delivered(dsn: str, expected: int) -> bool:
    counts = states(dsn)
    return counts["delivered"] == expected and sum(counts.values()) == expected


def received_ids(receiver: Receiver) -> list[str]:
    """webhook-id of every request the receiver got, in arrival order, repeats included."""
    return [r.header("webhook-id") or "" for r in receiver.snapshot()]


def nothing_lost(dsn: str, receiver: Receiver, acknowledged: Iterable[str],
                 in_doubt: Iterable[str]) -> tuple[set[str], list[str]]:
    """After a database crash: every commit the server acknowledged is stored, nothing
    else is but commits left in doubt, and every stored event is delivered and sent.
    Returns the stored event ids and the ids of every request (repeats included)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        stored = {str(i) for (i,) in conn.execute("SELECT id FROM outbox.events")}
    acknowledged = set(acknowledged)
    assert acknowledged <= stored, "a commit the server acknowledged is missing"
    assert stored <= acknowledged | set(in_doubt)
    wait_until(lambda: all_delivered(dsn, len(stored)), 60, "every stored event delivered")
    got = received_ids(receiver)
    assert set(got) == stored, "an event was sent that is not stored, or one was not sent"
    return stored, got


class Tracker:
    """A receiver responder that answers after ``delay`` and watches for double flights.

    ``current`` holds the webhook-ids being answered right now; an id that
    arrives while it is already there is recorded in ``overlaps``: the same
    delivery in flight twice at once.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.current: Counter[str] = Counter()
        self.overlaps: list[str] = []
        self.peak = 0
        self.spans: list[list[float]] = []  # [start, end] per request, monotonic; end 0: open
        self._lock = threading.Lock()

    async def __call__(self, request: Request) -> Response:
        webhook_id = request.header("webhook-id") or ""
        with self._lock:
            if self.current[webhook_id]:
                self.overlaps.append(webhook_id)
            self.current[webhook_id] += 1
            self.peak = max(self.peak, sum(self.current.values()))
            span = [time.monotonic(), 0.0]
            self.spans.append(span)
        try:
            await asyncio.sleep(self.delay)
        finally:
            with self._lock:
                span[1] = time.monotonic()
                self.current[webhook_id] -= 1
                if not self.current[webhook_id]:
                    del self.current[webhook_id]
        return Response(200)

    def in_flight(self) -> int:
        with self._lock:
            return sum(self.current.values())

    def ended_before(self, moment: float) -> bool:
        """Every request that arrived before ``moment`` (monotonic) has been answered."""
        with self._lock:
            return all(end for start, end in self.spans if start < moment)


class Gate:
    """Holds receiver answers (in the receiver's loop) until the test thread opens it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def wait(self) -> None:
        with self._lock:
            if self._open:
                return
            event = asyncio.Event()
            self._waiters.append((asyncio.get_running_loop(), event))
        await event.wait()

    def open(self) -> None:
        with self._lock:
            self._open = True
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)


def duplicates(ids: Iterable[str]) -> int:
    """How many requests repeated an id already received."""
    counts = Counter(ids)
    return sum(n - 1 for n in counts.values())


def listener_pids(dsn: str) -> set[int]:
    """Backends of dispatchers' LISTEN connections to the database of ``dsn``.

    Each dispatcher names its listener connection "outbox-dispatcher listener".
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'outbox-dispatcher listener'")
        return {int(pid) for (pid,) in rows}


def delivery_row(dsn: str, event_id: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT state, attempts, last_status, last_error, lease_token"
                    " FROM outbox.deliveries WHERE event_id = %s", (uuid.UUID(event_id),))
        row = cur.fetchone()
        assert row is not None
        assert cur.description is not None
        return dict(zip([c.name for c in cur.description], row, strict=True))


def summary(name: str, **facts: Any) -> None:
    """One line on stdout (shown with ``pytest -s`` or on failure) for the report."""
    print(f"[resilience] {name}: {json.dumps(facts, default=str)}")


@pytest.fixture
def fleet(dsn: str) -> Iterator[Fleet]:
    """Dispatchers started for one test, all stopped (or killed) at its end."""
    group = Fleet(dsn)
    try:
        yield group
    finally:
        group.close()
