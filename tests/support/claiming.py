"""The claim and complete statements run by hand, as one dispatcher would run them."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from dispatcher.policy.model import ClaimRow
from outbox.sql import queries

Conn = psycopg.Connection[Any]
# Columns of a claimed row, by name: positions in ClaimRow, the one statement of its shape.
_AT = {name: index for index, name in enumerate(ClaimRow._fields)}
ID, ENDPOINT, ATTEMPTS, TOKEN, EVENT = (_AT[n] for n in (
    "id", "endpoint_id", "attempts", "lease_token", "event_id"))
GROUP, SLOT, SLOT_TOKEN, SEND_IN, PROBE = (_AT[n] for n in (
    "grp", "slot", "slot_token", "send_in", "probe"))


def claim(conn: Conn, endpoint_ids: list[int], rows: int = 100, *, requests: int | None = None,
          prefetch: int = 0, held: int = 0, lease_seconds: float = 30,
          horizon: float = 0.25) -> list[tuple[Any, ...]]:
    """One claim for these endpoints (each asking ``requests`` slots, default ``rows``)."""
    count = len(endpoint_ids)
    found = conn.execute(queries["claim"], {
        "endpoint_ids": endpoint_ids, "requests": [rows if requests is None else requests] * count,
        "held": [held] * count, "prefetch": [prefetch] * count, "rows": [rows] * count,
        "lease_seconds": lease_seconds, "horizon": horizon}).fetchall()
    conn.commit()
    return found


def finish(conn: Conn, row: tuple[Any, ...], state: str = "delivered", *,
           verdict: bool | None = None) -> list[tuple[Any, ...]]:
    """Record a claimed row's outcome and free its slot; ``verdict`` True/False tells the
    breaker the endpoint answered / failed. The complete query's rows come back."""
    results = json.dumps([[row[ID], str(row[TOKEN]), state, 0.0, None, 200, False]])
    slots = [[row[ENDPOINT], row[SLOT], str(row[SLOT_TOKEN])]] if row[SLOT] is not None else []
    circuits = [] if verdict is None else [[row[ENDPOINT], verdict, 0 if verdict else 1]]
    written = conn.execute(queries["complete"], {
        "results": results, "slots": json.dumps(slots),
        "circuits": json.dumps(circuits)}).fetchall()
    conn.commit()
    return written
