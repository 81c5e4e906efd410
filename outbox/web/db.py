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
in between does no harm). The pooling itself is psycopg_pool's (opened on
demand, a broken connection replaced, a waiter bounded); this module is the
settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, LiteralString

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from outbox._shared.dsn import KEEPALIVES, server_options, without_passwords
from outbox._shared.search_path import arrived
from outbox._shared.text import first_line


class NoConnection(Exception):
    """Every connection was busy for longer than a request may wait (or none could be
    made with the view's settings)."""


class SettingsIgnored(Exception):
    """A new connection runs without the settings its startup packet asked for."""


# Each statement's settings as the server applied them; every name qualified, since the
# path may be the database's own when they did not arrive.
_APPLIED: LiteralString = (
    "SELECT pg_catalog.current_setting('search_path'),"
    " (SELECT s.setting FROM pg_catalog.pg_settings s"
    "  WHERE s.name OPERATOR(pg_catalog.=) 'statement_timeout'),"
    " pg_catalog.current_setting('default_transaction_read_only')")


class Pool:
    """At most ``size`` connections, opened when first needed, reused while healthy."""

    def __init__(self, dsn: str, *, size: int, statement_timeout: float,
                 read_only: bool, wait: float, max_idle: float = 600.0) -> None:
        millis = max(1, round(statement_timeout * 1000))
        # work_mem: the dead-letter listing sorts its rows (100,000 dead letters, some
        # 10 MB) in memory rather than on disk.
        settings = [f"-c statement_timeout={millis}", "-c jit=off", "-c work_mem=16MB",
                    f"-c idle_in_transaction_session_timeout={millis * 2}"]
        if read_only:
            settings.append("-c default_transaction_read_only=on")
        else:
            settings.append(f"-c lock_timeout={min(millis, 2000)}")
        self._wait = wait
        self._dsn = dsn
        self._expected = (millis, read_only)
        self._ignored: str | None = None
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            dsn, min_size=0, max_size=size, open=True, name="outbox-web", max_idle=max_idle,
            configure=self._check,
            kwargs={"autocommit": True, "connect_timeout": 10, "prepare_threshold": None,
                    "application_name": "outbox-web", **KEEPALIVES,
                    "options": server_options(dsn, " ".join(settings))})

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a new connection whose settings did not reach the server.

        A pooler that drops startup parameters (PgBouncer's
        ``ignore_startup_parameters = options``) would leave the database's own
        search_path, where planted code could run as the viewer's role, and the
        readers without read-only and without their statement timeout. The pool
        discards the connection; a page then says why instead of waiting.
        """
        row = conn.execute(_APPLIED).fetchone()
        path, millis, read_only = (str(v) for v in row) if row else ("", "", "")
        if arrived(path) and millis == str(self._expected[0]) and (
                read_only == "on" or not self._expected[1]):
            self._ignored = None
            return
        self._ignored = (
            f"the server did not apply the view's connection settings (search_path "
            f"{path!r}, statement_timeout {millis} ms, read-only {read_only}): a connection "
            "pooler in between drops startup parameters (PgBouncer's "
            "ignore_startup_parameters = options); point the view at PostgreSQL directly")
        raise SettingsIgnored(self._ignored)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A healthy connection for the block; a broken one is closed, not given back.
        Once a new connection was refused for its settings, pages fail at once (the pool
        goes on trying in the background, and the first that passes clears it)."""
        if self._ignored:
            raise NoConnection(self._ignored)
        try:
            with self._pool.connection(timeout=self._wait) as conn:
                yield conn
        except PoolTimeout:
            raise NoConnection(self._ignored or self._unreachable()
                               or f"every database connection was busy for {self._wait:g} s",
                               ) from None

    def _unreachable(self) -> str | None:
        """Why no connection could be had, when it is that none can be made: one connection
        tried here, since the pool keeps its errors to itself and counts a connection it
        keeps trying to make as one of its own (None: the database answers, and the pool's
        connections were all lent)."""
        try:
            psycopg.connect(self._dsn, connect_timeout=5, application_name="outbox-web",
                            **KEEPALIVES).close()
        except psycopg.Error as exc:
            return "cannot reach the database: " + without_passwords(first_line(exc),
                                                                     [self._dsn])
        return None

    def busy(self) -> bool:
        """Whether a connection is lent out, or asked for, right now."""
        stats = self._pool.get_stats()
        return (stats.get("pool_size", 0) > stats.get("pool_available", 0)
                or stats.get("requests_waiting", 0) > 0)

    def close(self) -> None:
        self._pool.close()
