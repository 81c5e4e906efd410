"""Every kind of connection a caller may hold, as one handle: publish, commit, roll back.

``KINDS`` lists one opener per kind (psycopg, its async side, SQLAlchemy's
connections and sessions, psycopg2); each takes a DSN and yields a
:class:`Handle` on a connection that has not begun a transaction yet.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg2
import psycopg2.extras
import pytest
from psycopg.rows import dict_row

import outbox


@dataclass
class Handle:
    """One way of publishing: send events, then end the transaction."""

    publish: Callable[[str], uuid.UUID]
    publish_many: Callable[[list[str]], list[uuid.UUID]]
    commit: Callable[[], None]
    rollback: Callable[[], None]
    in_transaction: Callable[[], bool] | None = None
    target: Any = None
    """The connection-like object itself, for other functions taking one."""
    runner: asyncio.Runner | None = None
    """The runner driving it, when it is an async one."""


def _sync(target: Any, commit: Callable[[], None], rollback: Callable[[], None],
          in_transaction: Callable[[], bool] | None = None) -> Handle:
    return Handle(
        publish=lambda t: outbox.publish(target, t, {"via": type(target).__name__}),
        publish_many=lambda ts: outbox.publish_many(target, [outbox.Event(t, {}) for t in ts]),
        commit=commit, rollback=rollback, in_transaction=in_transaction, target=target)


def _async(runner: asyncio.Runner, target: Any, commit: Callable[[], Coroutine[Any, Any, None]],
           rollback: Callable[[], Coroutine[Any, Any, None]],
           in_transaction: Callable[[], bool] | None = None) -> Handle:
    return Handle(
        publish=lambda t: runner.run(outbox.apublish(target, t, {"via": "async"})),
        publish_many=lambda ts: runner.run(
            outbox.apublish_many(target, [outbox.Event(t, {}) for t in ts])),
        commit=lambda: runner.run(commit()), rollback=lambda: runner.run(rollback()),
        in_transaction=in_transaction, target=target, runner=runner)


def _sa_url(dsn: str, driver: str = "psycopg") -> Any:
    from sqlalchemy.engine import URL
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return URL.create(f"postgresql+{driver}", username=str(info["user"]),
                      password=str(info["password"]) if info.get("password") else None,
                      host=str(info["host"]), port=int(str(info["port"])),
                      database=str(info["dbname"]))


@contextmanager
def psycopg_connection(dsn: str) -> Iterator[Handle]:
    with psycopg.connect(dsn) as conn:
        yield _sync(conn, conn.commit, conn.rollback)


@contextmanager
def psycopg_cursor(dsn: str) -> Iterator[Handle]:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        yield _sync(cur, conn.commit, conn.rollback)


@contextmanager
def psycopg_dict_rows(dsn: str) -> Iterator[Handle]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        yield _sync(conn, conn.commit, conn.rollback)


@contextmanager
def psycopg_client_cursor(dsn: str) -> Iterator[Handle]:
    with psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor) as conn:
        yield _sync(conn, conn.commit, conn.rollback)


@contextmanager
def psycopg_async_connection(dsn: str) -> Iterator[Handle]:
    with asyncio.Runner() as runner:
        conn = runner.run(psycopg.AsyncConnection.connect(dsn))
        try:
            yield _async(runner, conn, conn.commit, conn.rollback)
        finally:
            runner.run(conn.close())


@contextmanager
def psycopg_async_cursor(dsn: str) -> Iterator[Handle]:
    with asyncio.Runner() as runner:
        conn = runner.run(psycopg.AsyncConnection.connect(dsn))
        try:
            yield _async(runner, conn.cursor(), conn.commit, conn.rollback)
        finally:
            runner.run(conn.close())


@contextmanager
def sqlalchemy_connection(dsn: str, driver: str = "psycopg") -> Iterator[Handle]:
    from sqlalchemy import create_engine
    engine = create_engine(_sa_url(dsn, driver))
    try:
        with engine.connect() as conn:
            yield _sync(conn, conn.commit, conn.rollback, conn.in_transaction)
    finally:
        engine.dispose()


@contextmanager
def sqlalchemy_psycopg2_connection(dsn: str) -> Iterator[Handle]:
    with sqlalchemy_connection(dsn, "psycopg2") as handle:
        yield handle


@contextmanager
def sqlalchemy_session(dsn: str) -> Iterator[Handle]:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session
    engine = create_engine(_sa_url(dsn))
    try:
        with Session(engine) as session:
            yield _sync(session, session.commit, session.rollback, session.in_transaction)
    finally:
        engine.dispose()


@contextmanager
def sqlalchemy_async_connection(dsn: str) -> Iterator[Handle]:
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio extra (greenlet) is missing")
    from sqlalchemy.ext.asyncio import create_async_engine
    with asyncio.Runner() as runner:
        engine = create_async_engine(_sa_url(dsn))
        conn = engine.connect()
        runner.run(conn.start())
        try:
            yield _async(runner, conn, conn.commit, conn.rollback, conn.in_transaction)
        finally:
            runner.run(conn.close())
            runner.run(engine.dispose())


@contextmanager
def sqlalchemy_async_session(dsn: str) -> Iterator[Handle]:
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio extra (greenlet) is missing")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    with asyncio.Runner() as runner:
        engine = create_async_engine(_sa_url(dsn))
        session = AsyncSession(engine)
        try:
            yield _async(runner, session, session.commit, session.rollback,
                         session.in_transaction)
        finally:
            runner.run(session.close())
            runner.run(engine.dispose())


@contextmanager
def psycopg2_connection(dsn: str) -> Iterator[Handle]:
    conn = psycopg2.connect(dsn)
    try:
        yield _sync(conn, conn.commit, conn.rollback)
    finally:
        conn.close()


@contextmanager
def psycopg2_cursor(dsn: str) -> Iterator[Handle]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            yield _sync(cur, conn.commit, conn.rollback)
    finally:
        conn.close()


@contextmanager
def psycopg2_real_dict_cursor(dsn: str) -> Iterator[Handle]:
    conn = psycopg2.connect(dsn, cursor_factory=psycopg2.extras.RealDictCursor)
    try:
        yield _sync(conn, conn.commit, conn.rollback)
    finally:
        conn.close()


KINDS = [psycopg_connection, psycopg_cursor, psycopg_dict_rows, psycopg_client_cursor,
         psycopg_async_connection, psycopg_async_cursor,
         sqlalchemy_connection, sqlalchemy_session, sqlalchemy_psycopg2_connection,
         sqlalchemy_async_connection, sqlalchemy_async_session,
         psycopg2_connection, psycopg2_cursor, psycopg2_real_dict_cursor]
