"""Assertions over what a transaction has published (its own, uncommitted rows)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.rows import dict_row

from outbox.sql import queries


def published_events(conn: psycopg.Connection[Any], type: str | None = None,
                     ) -> list[dict[str, Any]]:
    """Events visible to ``conn`` (its own uncommitted ones included), oldest first."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(queries["testing_published_events"], {"type": type})
        rows = cur.fetchall()
    for row in rows:
        if isinstance(row["payload"], str):
            row["payload"] = json.loads(row["payload"])
    return rows


def assert_published(conn: psycopg.Connection[Any], type: str,
                     payload: Any = None, *, key: str | None = None,
                     count: int | None = None) -> list[dict[str, Any]]:
    """Assert that ``conn`` has published events of ``type`` matching payload and key."""
    matching = [
        event for event in published_events(conn, type)
        if (payload is None or event["payload"] == payload)
        and (key is None or event["key"] == key)
    ]
    if count is None and not matching:
        raise AssertionError(
            f"no {type!r} event published matching payload={payload!r} key={key!r}")
    if count is not None and len(matching) != count:
        raise AssertionError(f"expected {count} {type!r} events, found {len(matching)}")
    return matching
