"""The view's own database connections: a few readers, and one writer for the actions.

Every connection is the view's alone (``application_name`` ``outbox-web``,
so that an operator sees it in ``pg_stat_activity``), in autocommit: each
admin function opens and ends its own short transaction, so no snapshot is
ever held between two requests (a held one would keep vacuum from the queue
table). Each statement runs under ``statement_timeout`` and, for the
writer, ``lock_timeout``: a page that cannot answer in time is an error
page, never a session left waiting in front of ``publish()`` or a claim.
Readers are ``default_transaction_read_only``: whatever a page runs, it
cannot write. Statements are never prepared server-side, so that a plan
chosen for one filter is not reused for another (and a transaction pooler
in between does no harm).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from outbox._shared.dsn import server_options


class NoConnection(Exception):
    """Every connection was busy for longer than a request may wait."""


class Pool:
    """At most ``size`` connections, opened when first needed, reused while healthy."""

    def __init__(self, dsn: str, *, size: int, statement_timeout: float,
                 read_only: bool, wait: float) -> None:
        millis = max(1, round(statement_timeout * 1000))
        # work_mem: the dead-letter listing sorts its rows (100,000 dead letters, some
        # 10 MB) in memory rather than on disk.
        settings = [f"-c statement_timeout={millis}", "-c jit=off", "-c work_mem=16MB",
                    f"-c idle_in_transaction_session_timeout={millis * 2}"]
        if read_only:
            settings.append("-c default_transaction_read_only=on")
        else:
            settings.append(f"-c lock_timeout={min(millis, 2000)}")
        self._dsn = dsn
        self._options = server_options(dsn, " ".join(settings))
        self._idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue()
        self._room = threading.BoundedSemaphore(size)
        self._wait = wait

    def _open(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10,
                               application_name="outbox-web", options=self._options)
        conn.prepare_threshold = None
        return conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A healthy connection for the block; a broken one is closed, not given back."""
        if not self._room.acquire(timeout=self._wait):
            raise NoConnection(f"every database connection was busy for {self._wait:g} s")
        conn: psycopg.Connection[Any] | None = None
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self._open()
            yield conn
        finally:
            if conn is not None:
                idle = conn.info.transaction_status == TransactionStatus.IDLE
                if conn.broken or conn.closed or not idle:
                    conn.close()
                else:
                    self._idle.put(conn)
            self._room.release()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
