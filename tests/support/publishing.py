"""Helpers shared by the publishing tests: endpoints written with plain SQL, committed state."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import pq

from tests.support.dispatcher import wait_until


def add_endpoint(conn: psycopg.Connection[Any], name: str, like: Sequence[str] = ("%",), *,
                 enabled: bool = True, removed: bool = False) -> int:
    """Insert an endpoint row (events_like as given) and commit; returns its id."""
    row = conn.execute(
        "INSERT INTO outbox.endpoints (name, url, events, events_like, enabled, removed_at) "
        "VALUES (%s, %s, %s, %s, %s, CASE WHEN %s THEN now() END) RETURNING id",
        (name, f"http://127.0.0.1:9/{name}", list(like), list(like), enabled, removed),
    ).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def committed(dsn: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of a query run on a separate connection: what other sessions can see."""
    with psycopg.connect(dsn, autocommit=True) as other:
        return other.execute(sql, params).fetchall()


def committed_event_ids(dsn: str) -> list[uuid.UUID]:
    """Ids of the committed events, in publish order."""
    return [row[0] for row in committed(dsn, "SELECT id FROM outbox.events ORDER BY seq")]


def delivery_count(dsn: str) -> int:
    return int(committed(dsn, "SELECT count(*) FROM outbox.deliveries")[0][0])


def wait_until_blocked(dsn: str, pid: int) -> None:
    """Wait until backend ``pid`` waits on a lock (e.g. another transaction's row)."""
    def blocked() -> bool:
        rows = committed(dsn, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                         (pid,))
        return bool(rows) and rows[0][0] == "Lock"
    wait_until(blocked, 10, f"backend {pid} to wait on a lock", interval=0.01)


@contextmanager
def traced(conn: psycopg.Connection[Any], path: Path) -> Iterator[list[str]]:
    """Record the protocol messages ``conn`` sends ("F" lines) while the block runs.

    libpq's own trace: what it shows is what really went over the wire.
    """
    messages: list[str] = []
    with path.open("w") as stream:
        conn.pgconn.trace(stream.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield messages
        finally:
            conn.pgconn.untrace()  # flushes
    messages.extend(line for line in path.read_text().splitlines() if line.startswith("F\t"))
