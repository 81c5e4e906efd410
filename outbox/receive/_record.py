"""first_time / afirst_time: record, in the caller's transaction, that an event was processed.

One statement (``queries["inbox_record"]``) run through the executors
``publish()`` runs on (``outbox._driver``), so that every connection kind it
takes works here too. The input checks are the pure core; the shells only
execute.

Nothing here commits or rolls back: the record lives or dies with the
caller's transaction, and so does the work done beside it.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from outbox._driver import async_executor, sync_executor, values
from outbox._shared.schema import MISSING_INBOX, is_missing
from outbox.errors import SchemaMissing
from outbox.sql import queries

DEFAULT_CONSUMER: Final = "default"
MAX_LENGTH: Final = 1000
"""The longest event id or consumer name taken, in characters (an index key is bounded)."""


def _params(event_id: str | uuid.UUID, consumer: str) -> dict[str, Any]:
    if isinstance(event_id, uuid.UUID):
        event_id = str(event_id)
    for name, value in (("event_id", event_id), ("consumer", consumer)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")
        if not value or len(value) > MAX_LENGTH or "\x00" in value:
            raise ValueError(f"{name} must be 1 to {MAX_LENGTH} characters, without NUL")
    return {"event_id": event_id, "consumer": consumer}


def _first(rows: Any) -> bool:
    return bool(rows) and bool(values(rows[0])[0])


def first_time(conn: Any, event_id: str | uuid.UUID, *,
               consumer: str = DEFAULT_CONSUMER) -> bool:
    """Record that ``consumer`` processed ``event_id``; True only the first time.

    In the caller's transaction, on any connection kind ``publish()`` takes.
    False when a committed transaction, or this one, recorded it before.
    Another open transaction holding the same record is waited for: its commit
    makes this False, its rollback True (at READ COMMITTED).
    """
    params = _params(event_id, consumer)
    execute = sync_executor(conn, "record a first time")
    try:
        return _first(execute(queries["inbox_record"], params))
    except Exception as exc:
        if is_missing(exc):
            raise SchemaMissing(MISSING_INBOX) from exc
        raise


async def afirst_time(conn: Any, event_id: str | uuid.UUID, *,
                      consumer: str = DEFAULT_CONSUMER) -> bool:
    """The async twin of :func:`first_time`, for psycopg and SQLAlchemy async connections."""
    params = _params(event_id, consumer)
    execute = await async_executor(conn, "record a first time")
    try:
        return _first(await execute(queries["inbox_record"], params))
    except Exception as exc:
        if is_missing(exc):
            raise SchemaMissing(MISSING_INBOX) from exc
        raise
