"""``/search?q=TEXT``: the events an operator may hold the name of, from a log line or a
customer's ticket, or the customer itself.

The text is tried as an event id (the primary key) and as an idempotency
key (its unique index; ``publish_many``'s own lookup): each names one event
at most, found by an index, and a match is the answer. Only when neither
matches is it taken for an ordering key, listed as ``outbox events list
--key`` lists it (events newest first): no index leads there, so the walk
costs what the command's does, answering soon for a key with recent events
and within the view's statement timeout or not at all for a rare key on a
very large table (BENCHMARKS.md, "The web view").

The page (not its JSON, which stays the events list) also knows tenants: a
text that names a tenant (:func:`outbox.web.tenants.is_tenant`, index
probes) leads to that tenant's endpoints when it names no event. Its walk
as an ordering key is then cut at :data:`TENANT_WALK_SECONDS`: a customer's
name is seldom also a key, and support should not wait the whole statement
timeout (or meet its 503) to reach the customer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from outbox import admin
from outbox.sql import queries
from outbox.web.params import event_id
from outbox.web.tenants import is_tenant

TENANT_WALK_SECONDS = 1.0
"""How long a tenant's name is looked for as an ordering key before the tenant is the
answer."""


@dataclass(frozen=True)
class Found:
    events: list[admin.EventLine]
    tenant: str | None = None
    """The text, when it names a tenant too (asked with ``tenants=True`` only)."""


def search(conn: psycopg.Connection[Any], text: str, *, limit: int,
           tenants: bool = False) -> Found:
    """The event ``text`` names by id or idempotency key; failing those, the events of
    that ordering key, newest first (at most ``limit``); with ``tenants``, whether it
    names a tenant, the walk then cut short."""
    ids: list[uuid.UUID] = []
    as_id = event_id(text)
    if as_id is not None:
        ids.append(as_id)
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["event_ids_by_idempotency_key"],
                           {"idempotency_keys": [text]}).fetchall()
    ids += [uuid.UUID(found) for _, found in rows]
    named = admin.events(conn, event_ids=ids, limit=len(ids)) if ids else []
    if named:
        return Found(named)
    if not tenants or not is_tenant(conn, text):
        return Found(admin.events(conn, key=text, limit=limit))
    try:
        with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(queries["web_short_walk"],
                        {"millis": str(int(TENANT_WALK_SECONDS * 1000))})
            keyed = admin.events(conn, key=text, limit=limit)
    except psycopg.errors.QueryCanceled:
        keyed = []
    return Found(keyed, text)
