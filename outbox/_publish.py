"""publish / apublish / publish_many: thin shells over one pure core.

The core (:func:`_plan`) is a generator that yields the statements to run and
receives their rows; it never touches a connection. The sync shell drives it
with a blocking executor, the async shell with an awaiting one, so the two
cannot drift apart. Executors adapt each kind of connection a caller may hold
(psycopg 3, SQLAlchemy 2, any DB-API 2 connection such as psycopg2 or
Django's) without importing the optional drivers.

Nothing here commits or rolls back: the event lives or dies with the caller's
transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from outbox._event import MAX_PAYLOAD_BYTES, Batch, Event, build_batch
from outbox._shared import tracecontext
from outbox.errors import BacklogFull, OutboxError, SchemaMissing
from outbox.sql import queries

Step = tuple[str, dict[str, Any]]
Rows = Sequence[Sequence[Any]]
Plan = Generator[Step, Rows, list[uuid.UUID]]
SyncExecute = Callable[[str, dict[str, Any]], Rows]
AsyncExecute = Callable[[str, dict[str, Any]], Awaitable[Rows]]

# undefined_table, invalid_schema_name: the outbox schema was never migrated.
_MISSING_SCHEMA_STATES = frozenset({"42P01", "3F000"})


def _values(row: Any) -> Sequence[Any]:
    """Row values whatever the caller's row factory (tuples, dicts, Row objects)."""
    if isinstance(row, Mapping):
        return list(row.values())
    return row  # type: ignore[no-any-return]


def _plan(batch: Batch) -> Plan:
    """The statements of one publish, as a generator: yields (sql, params), gets rows."""
    if not batch.ids:
        return []
    rows = yield queries["publish"], batch.params()
    if len(rows) == 1 and _values(rows[0])[0] is None:  # refused, nothing written
        _, _, endpoint, bound, backlog = _values(rows[0])
        raise BacklogFull(str(endpoint), int(bound), int(backlog))
    if len(rows) == len(batch.ids):  # one row per event inserted: no key met an older event
        return batch.uuids
    # Some rows met an idempotency key already stored (or earlier in this
    # batch): answer with the id of the event that holds it.
    inserted = {_values(row)[0] for row in rows}
    skipped = [key for event_id, key in zip(batch.ids, batch.idempotency_keys, strict=True)
               if event_id not in inserted]
    rows = yield queries["event_ids_by_idempotency_key"], {"idempotency_keys": skipped}
    existing = {str(_values(r)[0]): uuid.UUID(str(_values(r)[1])) for r in rows}
    ids: list[uuid.UUID] = []
    for event_id, own, key in zip(batch.ids, batch.uuids, batch.idempotency_keys, strict=True):
        if event_id in inserted:
            ids.append(own)
        elif key is not None and key in existing:
            ids.append(existing[key])
        else:  # pragma: no cover - the conflicting row vanished between two statements
            raise OutboxError(f"event with idempotency key {key!r} disappeared while publishing")
    return ids


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg, psycopg2 or SQLAlchemy-wrapped error, if any."""
    for candidate in (exc, getattr(exc, "orig", None)):
        state = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


def _missing_schema(exc: Exception) -> SchemaMissing | None:
    if _sqlstate(exc) in _MISSING_SCHEMA_STATES:
        return SchemaMissing("the outbox schema is missing in this database: "
                             "run `outbox migrate` first")
    return None


def _run(plan: Plan, execute: SyncExecute) -> list[uuid.UUID]:
    try:
        step = next(plan)
        while True:
            try:
                rows = execute(*step)
            except Exception as exc:
                if missing := _missing_schema(exc):
                    raise missing from exc
                raise
            step = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _arun(plan: Plan, execute: AsyncExecute) -> list[uuid.UUID]:
    try:
        step = next(plan)
        while True:
            try:
                rows = await execute(*step)
            except Exception as exc:
                if missing := _missing_schema(exc):
                    raise missing from exc
                raise
            step = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


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


def _sync_executor(conn: Any, verb: str = "publish") -> SyncExecute:
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
            # as the connection's prepare_threshold says: planning the publish
            # statement costs more than running it (BENCHMARKS.md, "Behind a
            # pooler"), and behind PgBouncer before 1.21 the caller turns it
            # off for the whole connection (prepare_threshold=None).
            with psycopg.Cursor(pg, row_factory=tuple_row) as cur:
                cur.execute(sql, params)
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


async def _async_executor(conn: Any, verb: str = "apublish") -> AsyncExecute:
    """An executor for an async connection (SQLAlchemy sessions must be awaited first)."""
    given = conn
    if isinstance(conn, psycopg.AsyncCursor):
        conn = conn.connection
    if isinstance(conn, psycopg.AsyncConnection):
        pg: psycopg.AsyncConnection[Any] = conn

        async def execute_psycopg(sql: str, params: dict[str, Any]) -> Rows:
            async with psycopg.AsyncCursor(pg, row_factory=tuple_row) as cur:
                await cur.execute(sql, params)
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


def _one(event_type: str, payload: Any, key: str | None, *,
         headers: Mapping[str, str] | None, idempotency_key: str | None,
         delay: timedelta | None) -> Batch:
    return build_batch([Event(event_type, payload, key=key, headers=headers,
                              idempotency_key=idempotency_key, delay=delay)],
                       trace=tracecontext.current())


def publish(conn: Any, type: str, payload: Any, *,
            key: str | None = None, headers: Mapping[str, str] | None = None,
            idempotency_key: str | None = None, delay: timedelta | None = None,
            ) -> uuid.UUID:
    """Publish one event inside the caller's open transaction; returns its id.

    The event exists exactly when that transaction commits. Bad input raises
    :class:`outbox.InvalidEvent` or :class:`outbox.PayloadTooLarge` before any
    SQL is sent; a database without the outbox schema raises
    :class:`outbox.SchemaMissing`.
    """
    batch = _one(type, payload, key, headers=headers, idempotency_key=idempotency_key,
                 delay=delay)
    return _run(_plan(batch), _sync_executor(conn))[0]


async def apublish(conn: Any, type: str, payload: Any, *,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   idempotency_key: str | None = None, delay: timedelta | None = None,
                   ) -> uuid.UUID:
    """The async twin of :func:`publish`, for psycopg and SQLAlchemy async connections."""
    batch = _one(type, payload, key, headers=headers, idempotency_key=idempotency_key,
                 delay=delay)
    return (await _arun(_plan(batch), await _async_executor(conn)))[0]


def publish_many(conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
    """Publish several events in one round trip; returns their ids in input order."""
    batch = build_batch(list(events), max_payload_bytes=MAX_PAYLOAD_BYTES,
                        trace=tracecontext.current())
    return _run(_plan(batch), _sync_executor(conn))


async def apublish_many(conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
    """The async twin of :func:`publish_many`."""
    batch = build_batch(list(events), max_payload_bytes=MAX_PAYLOAD_BYTES,
                        trace=tracecontext.current())
    return await _arun(_plan(batch), await _async_executor(conn))
