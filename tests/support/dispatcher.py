"""Drive the real dispatcher from tests: endpoints by SQL, a subprocess with deadlines, polling.

The delivery tests check what an operator would see, so the dispatcher runs
as ``python -m dispatcher`` in its own process, against the test's database,
delivering to a :class:`~outbox.testing.Receiver` on 127.0.0.1. Every wait
here has a deadline and fails with the dispatcher's log attached, so a hang
shows up as a readable failure instead of a stuck suite.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

import outbox
from outbox._postgres.cluster import free_port
from outbox.endpoints._checks import glob_to_like
from tests.support.cli import clean_environment, run_outbox

T = TypeVar("T")

FAST_ARGS = ("--poll-interval", "0.2", "--lease", "3", "--shutdown-grace", "2")
"""Dispatcher options that keep tests quick: frequent polls, short leases and grace."""

FAST_ENDPOINT: dict[str, Any] = {
    "min_backoff_seconds": 0.05,
    "max_backoff_seconds": 0.2,
    "timeout_seconds": 5.0,
    "max_attempts": 5,
}
"""Endpoint settings that keep retries quick; a test overrides what it checks."""

_LIMITED = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({0}, {0}));"
            " sys.argv = sys.argv[2:]; runpy.run_module('dispatcher', run_name='__main__')")
"""``python -c`` running ``python -m dispatcher ARGS`` under an open files limit (argv:
``-c CODE -m dispatcher ARGS``)."""
_JSON_COLUMNS = {"headers", "previous_secrets"}
_COLUMNS = {"secret", "max_attempts", "timeout_seconds", "min_backoff_seconds",
            "max_backoff_seconds", "max_in_flight", "rate_limit", "max_batch", "format",
            "breaker_failures", "breaker_cooldown_seconds", "breaker_window_seconds",
            "breaker_rate", "max_pending",
            "send_tracestate", "headers", "enabled", "previous_secrets", "disabled_reason",
            "ca_file", "client_cert", "client_key", "trace_context", "guarded", "tenant",
            "disabled_by"}


def add_endpoint(conn: psycopg.Connection[Any], name: str, url: str, *,
                 events: tuple[str, ...] = ("*",), **settings: Any) -> int:
    """Insert a live endpoint (columns of outbox.endpoints as keywords) and commit; its id."""
    unknown = set(settings) - _COLUMNS
    if unknown:
        raise TypeError(f"not an endpoint column: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {**FAST_ENDPOINT, **settings, "name": name, "url": url,
                              "events": list(events),
                              "events_like": [glob_to_like(p) for p in events]}
    for column in _JSON_COLUMNS & set(values):
        values[column] = Jsonb(values[column])
    query = sql.SQL("INSERT INTO outbox.endpoints ({}) VALUES ({}) RETURNING id").format(
        sql.SQL(", ").join(map(sql.Identifier, values)),
        sql.SQL(", ").join(map(sql.Placeholder, values)))
    row = conn.execute(query, values).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def set_enabled(conn: psycopg.Connection[Any], name: str, enabled: bool) -> None:
    conn.execute("UPDATE outbox.endpoints SET enabled = %s WHERE name = %s", (enabled, name))
    conn.commit()


def publish(conn: psycopg.Connection[Any], event_type: str, payload: Any, **options: Any,
            ) -> uuid.UUID:
    """One event, committed."""
    event_id = outbox.publish(conn, event_type, payload, **options)
    conn.commit()
    return event_id


def delivery(conn: psycopg.Connection[Any], event_id: uuid.UUID, endpoint: str | None = None,
             ) -> dict[str, Any]:
    """The event's delivery (to ``endpoint`` when it has several) as a dict of its columns."""
    rows = conn.execute(
        "SELECT e.name AS endpoint, d.state, d.attempts, d.last_error, d.last_status "
        "FROM outbox.deliveries d JOIN outbox.endpoints e ON e.id = d.endpoint_id "
        "WHERE d.event_id = %s AND (%s::text IS NULL OR e.name = %s) ORDER BY d.id",
        (event_id, endpoint, endpoint)).fetchall()
    conn.commit()
    assert len(rows) == 1, f"expected one delivery of {event_id}, found {len(rows)}"
    keys = ("endpoint", "state", "attempts", "last_error", "last_status")
    return dict(zip(keys, rows[0], strict=True))


def states(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """How many deliveries are in each state."""
    rows = conn.execute("SELECT state, count(*) FROM outbox.deliveries GROUP BY state").fetchall()
    conn.commit()
    return {str(state): int(n) for state, n in rows}


def wait_until(check: Callable[[], T | None], timeout: float = 20.0,
               what: str = "a condition", *, interval: float = 0.05,
               dispatcher: Dispatcher | None = None) -> T:
    """Poll ``check`` until it returns something truthy; that value. AssertionError on timeout.

    The one polling helper of the suite: tests wait with a deadline, never a bare sleep.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            log = f"\n--- dispatcher log ---\n{dispatcher.log()}" if dispatcher else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{log}")
        time.sleep(interval)


def wait_for_state(conn: psycopg.Connection[Any], event_id: uuid.UUID, state: str, *,
                   endpoint: str | None = None, timeout: float = 20.0,
                   dispatcher: Dispatcher | None = None) -> dict[str, Any]:
    """Poll until the event's delivery (to ``endpoint``) is in ``state``; that delivery."""
    def reached() -> dict[str, Any] | None:
        row = delivery(conn, event_id, endpoint)
        return row if row["state"] == state else None
    return wait_until(reached, timeout=timeout, dispatcher=dispatcher,
                      what=f"delivery of {event_id} to become {state}")


def wait_all_finished(conn: psycopg.Connection[Any], total: int, *, timeout: float = 30.0,
                      dispatcher: Dispatcher | None = None) -> dict[str, int]:
    """Poll until ``total`` deliveries are delivered or dead; the count per state."""
    def finished() -> dict[str, int] | None:
        now = states(conn)
        return now if now.get("delivered", 0) + now.get("dead", 0) == total else None
    return wait_until(finished, timeout=timeout, dispatcher=dispatcher,
                      what=f"{total} deliveries to finish")


def outbox_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the ``outbox`` command against ``dsn``; its exit code and output."""
    return run_outbox(dsn, *args)


class Dispatcher:
    """``python -m dispatcher`` as a subprocess; its log goes to a temporary file.

    ``with Dispatcher(dsn) as d:`` starts it and, on leaving, stops it with
    SIGTERM (SIGKILL if it overstays its deadline).
    """

    def __init__(self, dsn: str | None, *args: str, env: Mapping[str, str] | None = None,
                 once: bool = False, cwd: Path | None = None,
                 open_files: int | None = None) -> None:
        """``cwd``: where it runs (``python -m`` imports from there first: an old release);
        ``open_files``: the process's RLIMIT_NOFILE, soft and hard (``ulimit -n``);
        ``dsn`` None: no ``--dsn`` (``--databases`` among ``args``)."""
        self.port = free_port()
        self.open_files = open_files
        self.argv = [sys.executable, "-m", "dispatcher", *(["--dsn", dsn] if dsn else []),
                     "--metrics-host", "127.0.0.1", "--metrics-port", str(self.port),
                     *FAST_ARGS, *(["--once"] if once else []), *args]
        self.env = clean_environment(env)
        self._log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115
        self.process: subprocess.Popen[str] | None = None
        self.cwd = cwd

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Dispatcher:
        argv = self.argv
        if self.open_files is not None:  # as `ulimit -n N` would, in the child before it runs
            argv = [sys.executable, "-c", _LIMITED.format(self.open_files), *argv[1:]]
        self.process = subprocess.Popen(argv, env=self.env, stdout=self._log,
                                        stderr=subprocess.STDOUT, text=True, cwd=self.cwd)
        return self

    def log(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def wait(self, timeout: float = 60.0) -> int:
        """Wait for the process to exit by itself (``--once``); its exit code."""
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"dispatcher still running after {timeout:g} s\n--- log ---\n{self.log()}"
            ) from None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait; the exit code (the process is killed at the deadline)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def get(self, path: str) -> httpx.Response:
        """GET ``path`` from the metrics and health server."""
        with httpx.Client(trust_env=False, timeout=10) as client:
            return client.get(self.base_url + path)

    def wait_serving(self, timeout: float = 20.0) -> None:
        """Wait until the health server answers /readyz with 200."""
        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"dispatcher exited early\n--- log ---\n{self.log()}")
            try:
                return self.get("/readyz").status_code == 200
            except httpx.TransportError:
                return False
        wait_until(ready, timeout=timeout, what="the dispatcher to be ready", dispatcher=self)

    def __enter__(self) -> Dispatcher:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                self.stop()
        finally:
            self._log.close()


def run_once(dsn: str, *args: str, env: Mapping[str, str] | None = None,
             timeout: float = 60.0) -> tuple[int, str]:
    """Run ``outbox-dispatcher --once`` to its end; its exit code and log."""
    with Dispatcher(dsn, *args, env=env, once=True) as dispatcher:
        code = dispatcher.wait(timeout)
        return code, dispatcher.log()
