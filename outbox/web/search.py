"""``/search?q=TEXT``: the events an operator may hold the name of, from a log line or a
customer's ticket.

The text is tried as an event id (the primary key) and as an idempotency
key (its unique index; ``publish_many``'s own lookup): each names one event
at most, found by an index, and a match is the answer. Only when neither
matches is it taken for an ordering key, listed as ``outbox events list
--key`` lists it (events newest first): no index leads there, so the walk
costs what the command's does, answering soon for a key with recent events
and within the view's statement timeout or not at all for a rare key on a
very large table (BENCHMARKS.md, "The web view").
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
    """The event ``text`` names by id or idempotency key; failing those, the events of
    that ordering key, newest first (at most ``limit``)."""
    ids: list[uuid.UUID] = []
    as_id = event_id(text)
    if as_id is not None:
        ids.append(as_id)
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["event_ids_by_idempotency_key"],
                           {"idempotency_keys": [text]}).fetchall()
    ids += [uuid.UUID(found) for _, found in rows]
    named = admin.events(conn, event_ids=ids, limit=len(ids)) if ids else []
    return named or admin.events(conn, key=text, limit=limit)
