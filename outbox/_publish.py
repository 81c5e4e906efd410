"""publish / apublish / publish_many: thin shells over one pure core.

The core (:func:`_plan`) is a generator that yields the statements to run and
receives their rows; it never touches a connection. The sync shell drives it
with a blocking executor, the async shell with an awaiting one, so the two
cannot drift apart. The executors, one for each kind of connection a caller
may hold, are ``outbox._driver``'s.

Nothing here commits or rolls back: the event lives or dies with the caller's
transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterable, Mapping
from datetime import timedelta
from typing import Any

from outbox._driver import AsyncExecute, Rows, SyncExecute, async_executor, sync_executor, values
from outbox._event import MAX_PAYLOAD_BYTES, Batch, Event, build_batch
from outbox._quota import check_async, check_sync
from outbox._shared import tracecontext
from outbox._shared.schema import MISSING, is_missing
from outbox.errors import BacklogFull, OutboxError, SchemaMissing
from outbox.sql import queries

Step = tuple[str, dict[str, Any]]
Plan = Generator[Step, Rows, list[uuid.UUID]]


def _plan(batch: Batch) -> Plan:
    """The statements of one publish, as a generator: yields (sql, params), gets rows."""
    if not batch.ids:
        return []
    rows = yield queries["publish"], batch.params()
    if len(rows) == 1 and values(rows[0])[0] is None:  # refused, nothing written
        _, _, endpoint, bound, backlog, tenant = values(rows[0])
        raise BacklogFull(str(endpoint), int(bound), int(backlog),
                          tenant=None if tenant is None else str(tenant))
    if len(rows) == len(batch.ids):  # one row per event inserted: no key met an older event
        return batch.uuids
    # Some rows met an idempotency key already stored (or earlier in this
    # batch): answer with the id of the event that holds it.
    inserted = {values(row)[0] for row in rows}
    skipped = [key for event_id, key in zip(batch.ids, batch.idempotency_keys, strict=True)
               if event_id not in inserted]
    rows = yield queries["event_ids_by_idempotency_key"], {"idempotency_keys": skipped}
    existing = {str(values(r)[0]): uuid.UUID(str(values(r)[1])) for r in rows}
    ids: list[uuid.UUID] = []
    for event_id, own, key in zip(batch.ids, batch.uuids, batch.idempotency_keys, strict=True):
        if event_id in inserted:
            ids.append(own)
        elif key is not None and key in existing:
            ids.append(existing[key])
        else:  # pragma: no cover - the conflicting row vanished between two statements
            raise OutboxError(f"event with idempotency key {key!r} disappeared while publishing")
    return ids


def _run(plan: Plan, execute: SyncExecute) -> list[uuid.UUID]:
    try:
        step = next(plan)
        while True:
            try:
                rows = execute(*step)
            except Exception as exc:
                if is_missing(exc):
                    raise SchemaMissing(MISSING) from exc
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
                if is_missing(exc):
                    raise SchemaMissing(MISSING) from exc
                raise
            step = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _one(event_type: str, payload: Any, key: str | None, *,
         headers: Mapping[str, str] | None, idempotency_key: str | None,
         delay: timedelta | None, tenant: str | None) -> Batch:
    return build_batch([Event(event_type, payload, key=key, headers=headers,
                              idempotency_key=idempotency_key, delay=delay, tenant=tenant)],
                       trace=tracecontext.current())


def publish(conn: Any, type: str, payload: Any, *,
            key: str | None = None, headers: Mapping[str, str] | None = None,
            idempotency_key: str | None = None, delay: timedelta | None = None,
            tenant: str | None = None) -> uuid.UUID:
    """Publish one event inside the caller's open transaction; returns its id.

    The event exists exactly when that transaction commits. Bad input raises
    :class:`outbox.InvalidEvent` or :class:`outbox.PayloadTooLarge` before any
    SQL is sent; a database without the outbox schema raises
    :class:`outbox.SchemaMissing`. ``tenant`` (1-200 printable ASCII
    characters) travels with every delivery, keeps its own key order, and is
    asked about by the quota check (:func:`outbox.set_quota_check`) first.
    """
    batch = _one(type, payload, key, headers=headers, idempotency_key=idempotency_key,
                 delay=delay, tenant=tenant)
    check_sync(conn, batch.events, batch.tenants)
    return _run(_plan(batch), sync_executor(conn))[0]


async def apublish(conn: Any, type: str, payload: Any, *,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   idempotency_key: str | None = None, delay: timedelta | None = None,
                   tenant: str | None = None) -> uuid.UUID:
    """The async twin of :func:`publish`, for psycopg and SQLAlchemy async connections;
    an async quota check is awaited."""
    batch = _one(type, payload, key, headers=headers, idempotency_key=idempotency_key,
                 delay=delay, tenant=tenant)
    await check_async(conn, batch.events, batch.tenants)
    return (await _arun(_plan(batch), await async_executor(conn)))[0]


def publish_many(conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
    """Publish several events in one round trip; returns their ids in input order."""
    batch = build_batch(list(events), max_payload_bytes=MAX_PAYLOAD_BYTES,
                        trace=tracecontext.current())
    check_sync(conn, batch.events, batch.tenants)
    return _run(_plan(batch), sync_executor(conn))


async def apublish_many(conn: Any, events: Iterable[Event]) -> list[uuid.UUID]:
    """The async twin of :func:`publish_many`."""
    batch = build_batch(list(events), max_payload_bytes=MAX_PAYLOAD_BYTES,
                        trace=tracecontext.current())
    await check_async(conn, batch.events, batch.tenants)
    return await _arun(_plan(batch), await async_executor(conn))
