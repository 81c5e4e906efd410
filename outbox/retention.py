"""Retention: delete old finished deliveries and the events nothing needs any more.

Used by ``outbox purge`` and by the dispatcher's ``--retention`` setting.

What goes: delivered deliveries, and those discarded by their endpoint's
policy, whose ``finished_at`` is older than the cutoff, then events created
before the cutoff that have no delivery left (old unrouted events included).
What stays: pending and in-flight deliveries, dead letters, and the events of
all of those. Dead letters are kept until an operator retries them (``outbox
dead retry``; once delivered they age out like any other delivery) or deletes
them by hand, or, at an endpoint with ``--keep-dead``, until the
dispatcher's maintainer discards them (after which they age out too).

The work goes in small batches, each its own short transaction, so that a
large purge never holds many row locks or an old snapshot (which would keep
VACUUM from cleaning up behind the dispatchers). The cutoff is read once from
the database clock.

With ``inbox=True`` (``outbox purge``; never the dispatcher's ``--retention``)
the receiving side's records (``outbox.inbox``, see ``outbox.receive``)
processed before the cutoff go too. A receiver's own database may hold only
that table (``outbox migrate --inbox-only``): each half is purged when its
tables exist.

As with publish, one pure core (:func:`_plan`, a generator yielding the
statements of each transaction and receiving the rows of the last one)
drives a sync shell (:func:`purge`) and an async one (:func:`apurge`).
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, LiteralString

import psycopg
from psycopg.rows import tuple_row

from outbox._shared.pinned import pinned
from outbox._shared.schema import MISSING
from outbox._shared.search_path import SET_LOCAL
from outbox.errors import OutboxError, SchemaMissing
from outbox.sql import queries

DEFAULT_BATCH_SIZE = 1000

Statement = tuple[LiteralString, dict[str, Any]]
Rows = Sequence[tuple[Any, ...]]
Plan = Generator[list[Statement], Rows, "PurgeResult"]

_NIL = str(uuid.UUID(int=0))


@dataclass(frozen=True)
class PurgeResult:
    deliveries: int
    """Finished deliveries deleted: delivered, or discarded by the endpoint's policy."""
    events: int
    """Events deleted."""
    inbox: int = 0
    """Inbox records (processed event ids) deleted."""


def uuid7_floor(moment: datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``moment``'s millisecond: ids below it were made earlier."""
    ms = max(0, int(moment.timestamp() * 1000))
    return uuid.UUID(int=(ms & 0xFFFF_FFFF_FFFF) << 80)


PRODUCER_CLOCK_SLACK = timedelta(hours=1)
"""How far a producer's clock (which stamps the UUIDv7 ids) may lag the database's (which
stamps created_at) before a look for events published since a time misses some."""


def since_floor(moment: datetime) -> uuid.UUID:
    """An event id below every event published at or after ``moment`` (database clock),
    producers' clocks allowed to lag by :data:`PRODUCER_CLOCK_SLACK`: where a replay
    ``--since`` starts reading the events' primary key."""
    try:
        return uuid7_floor(moment - PRODUCER_CLOCK_SLACK)
    except OverflowError:  # year 1: every id is later anyway
        return uuid.UUID(int=0)


def _plan(older_than: timedelta, batch_size: int, inbox: bool) -> Plan:
    """The transactions of one purge, one list of statements per transaction."""
    rows = yield [(queries["purge_tables"], {"older_than": older_than})]
    has_events, has_inbox, inbox_cutoff = rows[0]
    if not has_events and not has_inbox:
        raise SchemaMissing(MISSING)
    records = 0
    if inbox and has_inbox:
        while True:
            rows = yield [(queries["inbox_purge_batch"],
                           {"cutoff": inbox_cutoff, "batch_size": batch_size})]
            deleted = int(rows[0][0])
            records += deleted
            if deleted < batch_size:
                break
    if not has_events:
        return PurgeResult(deliveries=0, events=0, inbox=records)
    rows = yield [(queries["purge_start"], {"older_than": older_than})]
    cutoff, endpoint_ids = rows[0]
    base = {"cutoff": cutoff, "batch_size": batch_size}

    deliveries = 0
    for endpoint_id in endpoint_ids:
        while True:
            rows = yield [(queries["purge_finished_batch"], {**base, "endpoint_id": endpoint_id})]
            delivered, discarded = int(rows[0][0]), int(rows[0][1])
            deliveries += delivered + discarded
            if delivered < batch_size and discarded < batch_size:
                break

    events = 0
    cursor = {**base, "after": _NIL, "bound": str(uuid7_floor(cutoff))}
    while True:
        rows = yield [(queries["purge_events_lock"], {}),
                      (queries["purge_events_batch"], cursor)]
        scanned, last_id, deleted = rows[0]
        events += int(deleted)
        if scanned < batch_size:
            return PurgeResult(deliveries=deliveries, events=events, inbox=records)
        cursor["after"] = last_id


def would_purge(conn: psycopg.Connection[Any], older_than: timedelta, *,
                inbox: bool = False) -> PurgeResult:
    """What :func:`purge` with ``older_than`` would delete now, counted and not deleted
    (``outbox purge --dry-run``): one read-only transaction."""
    _check(older_than, DEFAULT_BATCH_SIZE)
    deliveries = events = records = 0
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(queries["purge_tables"], {"older_than": older_than}).fetchone()
        assert row is not None
        has_events, has_inbox, cutoff = row
        if not has_events and not has_inbox:
            raise SchemaMissing(MISSING)
        if inbox and has_inbox:
            row = cur.execute(queries["inbox_would_purge"], {"cutoff": cutoff}).fetchone()
            records = int(row[0]) if row else 0
        if has_events:
            row = cur.execute(queries["purge_would_delete"], {
                "cutoff": cutoff, "bound": str(uuid7_floor(cutoff))}).fetchone()
            assert row is not None
            deliveries, events = int(row[0]), int(row[1])
    return PurgeResult(deliveries=deliveries, events=events, inbox=records)


def _check(older_than: timedelta, batch_size: int) -> None:
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")


def _idle(status: psycopg.pq.TransactionStatus) -> None:
    # Inside the caller's transaction every batch would become a savepoint of
    # one long transaction: exactly the long snapshot batching is meant to avoid.
    if status != psycopg.pq.TransactionStatus.IDLE:
        raise OutboxError("purge commits batch by batch: call it outside a transaction")


def purge(conn: psycopg.Connection[Any], older_than: timedelta,
          batch_size: int = DEFAULT_BATCH_SIZE, *, inbox: bool = False) -> PurgeResult:
    """Delete delivered (and discarded) deliveries and unneeded events older than ``older_than``.

    ``inbox``: inbox records processed before then too. Commits after each
    batch; the connection must not be inside a transaction.
    """
    _check(older_than, batch_size)
    _idle(conn.info.transaction_status)
    plan = _plan(older_than, batch_size, inbox)
    try:
        unit = next(plan)
        while True:
            rows: Rows = []
            with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(SET_LOCAL)  # the caller's connection, or one behind a pooler
                for sql, params in unit:
                    rows = cur.execute(sql, params).fetchall()
            unit = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def apurge(conn: psycopg.AsyncConnection[Any], older_than: timedelta,
                 batch_size: int = DEFAULT_BATCH_SIZE, *, inbox: bool = False) -> PurgeResult:
    """:func:`purge` for an ``AsyncConnection``."""
    _check(older_than, batch_size)
    _idle(conn.info.transaction_status)
    plan = _plan(older_than, batch_size, inbox)
    try:
        unit = next(plan)
        while True:
            rows: Rows = []
            async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(SET_LOCAL)
                for sql, params in unit:
                    await cur.execute(sql, params)
                    rows = await cur.fetchall()
            unit = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


__all__ = ["DEFAULT_BATCH_SIZE", "PurgeResult", "apurge", "purge", "uuid7_floor", "would_purge"]
