"""``/search?q=TEXT``: the events an operator may hold the name of, from a log line or a
customer's ticket.

The text is tried as each of three things, through the listing ``outbox
events list`` reads: an event id (the primary key), an idempotency key
(its unique index; ``publish_many``'s own lookup), and an ordering key
(``events list --key``: events newest first). The first two find one event
at most, each by an index; the third walks the events newest first, as the
command does, and so answers quickly for a key with recent events.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from outbox import admin
from outbox.sql import queries
from outbox.web.params import event_id


def search(conn: psycopg.Connection[Any], text: str, *, limit: int) -> list[admin.EventLine]:
    """The events ``text`` names, newest first, each once: by id, by idempotency key,
    and of that ordering key (at most ``limit`` of those)."""
    ids: list[uuid.UUID] = []
    as_id = event_id(text)
    if as_id is not None:
        ids.append(as_id)
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["event_ids_by_idempotency_key"],
                           {"idempotency_keys": [text]}).fetchall()
    ids += [uuid.UUID(found) for _, found in rows]
    named = admin.events(conn, event_ids=ids, limit=len(ids)) if ids else []
    keyed = admin.events(conn, key=text, limit=limit)
    seen: set[str] = set()
    found = []
    for line in sorted([*named, *keyed], key=lambda e: e.event_id, reverse=True):
        if line.event_id not in seen:
            seen.add(line.event_id)
            found.append(line)
    return found
