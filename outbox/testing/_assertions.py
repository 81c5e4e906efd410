"""Assertions over what the caller's transaction has published: its own, uncommitted rows.

Events committed earlier, by this connection or any other, are not counted:
a test that publishes nothing sees nothing, however full the table is. The
connection may be any kind ``publish()`` takes (psycopg, SQLAlchemy
``Connection`` or ``Session``, a DB-API 2 connection such as psycopg2's or
Django's); the statement runs through the same executor.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from outbox._driver import sync_executor, values
from outbox.sql import queries

_COLUMNS = ("id", "type", "key", "payload", "headers", "idempotency_key", "created_at",
            "tenant")


def _parsed(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def published_events(conn: Any, type: str | None = None) -> list[dict[str, Any]]:
    """Events the current, uncommitted transaction of ``conn`` published, oldest first.

    Each is a dict of ``id``, ``type``, ``key``, ``payload`` (parsed), ``headers``,
    ``idempotency_key``, ``created_at`` and ``tenant`` (None: none); ``type`` keeps only
    that type.
    """
    execute = sync_executor(conn, "read published events")
    rows = execute(queries["testing_published_events"], {"type": type})
    events = []
    for row in rows:
        event = dict(zip(_COLUMNS, list(values(row)), strict=True))
        event["id"] = uuid.UUID(str(event["id"]))
        event["payload"] = _parsed(event["payload"])
        event["headers"] = _parsed(event["headers"])
        events.append(event)
    return events


def assert_published(conn: Any, type: str, payload: Any = None, *, key: str | None = None,
                     count: int | None = None, tenant: str | None = None,
                     ) -> list[dict[str, Any]]:
    """Assert that ``conn``'s current transaction published events of ``type``.

    ``payload``, ``key`` and ``tenant``, when given, must match too; ``count``
    asks for exactly that many (``count=0``: none). Returns the matching events
    (as :func:`published_events` gives them: each with its ``tenant``).
    """
    matching = [
        event for event in published_events(conn, type)
        if (payload is None or event["payload"] == payload)
        and (key is None or event["key"] == key)
        and (tenant is None or event["tenant"] == tenant)
    ]
    if count is None and not matching:
        raise AssertionError(f"this transaction published no {type!r} event matching "
                             f"payload={payload!r} key={key!r}"
                             + (f" tenant={tenant!r}" if tenant is not None else ""))
    if count is not None and len(matching) != count:
        raise AssertionError(f"expected {count} {type!r} events published in this "
                             f"transaction, found {len(matching)}")
    return matching
