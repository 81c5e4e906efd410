"""Executors: the one way the producer side runs a statement on a caller's connection.

``publish()``, ``first_time()`` and ``outbox.testing``'s assertions take
whatever connection-like object the caller holds (psycopg 3, SQLAlchemy 2,
any DB-API 2 connection such as psycopg2 or Django's) and run their
statements on it, in the caller's transaction. This module turns each kind
into an executor, ``execute(sql, params) -> rows``, blocking or awaited,
without importing the optional drivers; so the kinds one of them takes are
the kinds every one takes.

Nothing here commits or rolls back.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from outbox.sql import queries

Rows = Sequence[Sequence[Any]]
SyncExecute = Callable[[str, dict[str, Any]], Rows]
AsyncExecute = Callable[[str, dict[str, Any]], Awaitable[Rows]]


def values(row: Any) -> Sequence[Any]:
    """Row values whatever the caller's row factory (tuples, dicts, Row objects)."""
    if isinstance(row, Mapping):
        return list(row.values())
    return row  # type: ignore[no-any-return]


def _is_sqlalchemy(obj: object, *kinds: str) -> bool:
    """Whether obj is one of SQLAlchemy's classes of these names (or a subclass of one)."""
    return any(base.__name__ in kinds and base.__module__.startswith("sqlalchemy.")
               for base in type(obj).__mro__)


def _check_paramstyle(sa_conn: Any) -> None:
    style = getattr(getattr(sa_conn, "dialect", None), "paramstyle", "pyformat")
    if style != "pyformat":
        raise TypeError(
            f"cannot publish through SQLAlchemy's {sa_conn.dialect.driver} driver: use "
            "postgresql+psycopg:// (or postgresql+psycopg2:// for synchronous code)")


_POOLED: weakref.WeakKeyDictionary[Any, bool | int] = weakref.WeakKeyDictionary()
"""Per psycopg connection: whether it goes through a transaction pooler (looked at once,
just before psycopg could first prepare one of publish's statements), or until then how
many statements publish ran on it."""


def _pooled_answer(backend_pid: int, rows: Rows) -> bool:
    """A pooler (PgBouncer) gives its clients a key of its own, not the server's: the pid
    libpq was told at connect then differs from the one the server reports."""
    return bool(rows) and int(rows[0][0]) != backend_pid


def _prepare(pg: psycopg.Connection[Any]) -> bool | None:
    """``prepare=`` for publish's statements on ``pg``: False through a transaction pooler,
    whose next transaction may run on another server connection, where a statement
    prepared on this one does not exist (PgBouncer before 1.21); else the connection's
    own prepare_threshold decides (None)."""
    pooled = _undecided(pg)
    if pooled is None:
        with psycopg.Cursor(pg, row_factory=tuple_row) as cur:
            cur.execute(queries["backend_pid"], prepare=False)
            pooled = _POOLED[pg] = _pooled_answer(pg.info.backend_pid, cur.fetchall())
    return False if pooled else None


def _undecided(pg: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool | None:
    """Whether ``pg`` is pooled, when that is known or does not matter yet; else None.

    psycopg prepares a statement on its prepare_threshold-th run, so the look
    can wait until then: a connection's first publish stays one round trip.
    """
    seen = _POOLED.get(pg, 0)
    if isinstance(seen, bool):
        return seen
    threshold = pg.prepare_threshold
    if threshold is None:
        return False  # it never prepares: nothing to fear from a pooler
    if seen + 1 < threshold:
        _POOLED[pg] = seen + 1
        return False
    return None


async def _aprepare(pg: psycopg.AsyncConnection[Any]) -> bool | None:
    """:func:`_prepare` for an async connection."""
    pooled = _undecided(pg)
    if pooled is None:
        async with psycopg.AsyncCursor(pg, row_factory=tuple_row) as cur:
            await cur.execute(queries["backend_pid"], prepare=False)
            pooled = _POOLED[pg] = _pooled_answer(pg.info.backend_pid, await cur.fetchall())
    return False if pooled else None


def sync_executor(conn: Any, verb: str = "publish") -> SyncExecute:
    """An executor for whatever synchronous connection-like object the caller holds.

    ``verb`` names the caller's function in the error for an unknown kind.
    """
    given = conn
    if isinstance(conn, psycopg.Cursor):  # any psycopg cursor: use its connection
        conn = conn.connection
    if isinstance(conn, psycopg.Connection):
        pg: psycopg.Connection[Any] = conn

        def execute_psycopg(sql: str, params: dict[str, Any]) -> Rows:
            # A plain Cursor whatever the connection's cursor_factory and
            # row_factory: a RawCursor would not understand %(name)s. Prepared
            # as the connection's prepare_threshold says (planning the publish
            # statement costs more than running it: BENCHMARKS.md, "Behind a
            # pooler"), except through a transaction pooler (_prepare).
            prepare = _prepare(pg)
            with psycopg.Cursor(pg, row_factory=tuple_row) as cur:
                cur.execute(sql, params, prepare=prepare)
                return cur.fetchall()
        return execute_psycopg
    if _is_sqlalchemy(conn, "Session", "scoped_session"):
        conn = conn.connection()  # begins the session's transaction if none is open
    if _is_sqlalchemy(conn, "Connection"):
        _check_paramstyle(conn)
        sa_conn = conn

        def execute_sqlalchemy(sql: str, params: dict[str, Any]) -> Rows:
            # exec_driver_sql begins SQLAlchemy's own transaction if none is
            # open, so the caller's commit() really commits our rows.
            return list(sa_conn.exec_driver_sql(sql, params).fetchall())
        return execute_sqlalchemy
    if not callable(getattr(conn, "cursor", None)) and callable(getattr(conn, "execute", None)):
        conn = getattr(conn, "connection", None)  # a DB-API cursor: use its connection
    if callable(getattr(conn, "cursor", None)):
        dbapi = conn

        def execute_dbapi(sql: str, params: dict[str, Any]) -> Rows:
            cur = dbapi.cursor()
            try:
                cur.execute(sql, params)
                return list(cur.fetchall())
            finally:
                cur.close()
        return execute_dbapi
    raise TypeError(
        f"cannot {verb} through a {type(given).__name__}: pass a psycopg connection or "
        "cursor, a SQLAlchemy Connection or Session, or a DB-API 2 connection")


async def async_executor(conn: Any, verb: str = "apublish") -> AsyncExecute:
    """An executor for an async connection (SQLAlchemy sessions must be awaited first)."""
    given = conn
    if isinstance(conn, psycopg.AsyncCursor):
        conn = conn.connection
    if isinstance(conn, psycopg.AsyncConnection):
        pg: psycopg.AsyncConnection[Any] = conn

        async def execute_psycopg(sql: str, params: dict[str, Any]) -> Rows:
            prepare = await _aprepare(pg)  # see execute_psycopg of sync_executor
            async with psycopg.AsyncCursor(pg, row_factory=tuple_row) as cur:
                await cur.execute(sql, params, prepare=prepare)
                return await cur.fetchall()
        return execute_psycopg
    if _is_sqlalchemy(conn, "AsyncSession", "async_scoped_session"):
        conn = await conn.connection()
    if _is_sqlalchemy(conn, "AsyncConnection"):
        _check_paramstyle(conn)
        sa_conn = conn

        async def execute_sqlalchemy(sql: str, params: dict[str, Any]) -> Rows:
            result = await sa_conn.exec_driver_sql(sql, params)
            return list(result.fetchall())
        return execute_sqlalchemy
    raise TypeError(
        f"cannot {verb} through a {type(given).__name__}: pass a psycopg "
        "AsyncConnection or AsyncCursor, or a SQLAlchemy AsyncConnection or AsyncSession")
