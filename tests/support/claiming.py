"""The claim and complete statements run by hand, as one dispatcher would run them."""

from __future__ import annotations

import json
from typing import Any, Literal

import psycopg

from dispatcher.limits.quota import HELD_BYTES
from dispatcher.limits.rate import PACE
from dispatcher.limits.ring import RING_STEPS
from dispatcher.policy.model import ClaimRow, Completed, Record
from outbox.sql import queries

Conn = psycopg.Connection[Any]
# Columns of a claimed row, by name: positions in ClaimRow, the one statement of its shape.
_AT = {name: index for index, name in enumerate(ClaimRow._fields)}
ID, ENDPOINT, ATTEMPTS, TOKEN, EVENT, PAYLOAD = (_AT[n] for n in (
    "id", "endpoint_id", "attempts", "lease_token", "event_id", "payload"))
GROUP, SLOT, SLOT_TOKEN, SEND_IN, PROBE, SIZE = (_AT[n] for n in (
    "grp", "slot", "slot_token", "send_in", "probe", "size"))


def claim(conn: Conn, endpoint_ids: list[int], rows: int = 100, *, requests: int | None = None,
          prefetch: int = 0, held: int = 0, lease_seconds: float = 30,
          horizon: float = 0.25, budget: int = HELD_BYTES, ring_after: str | None = None,
          ring_null: bool = False) -> list[tuple[Any, ...]]:
    """One claim for these endpoints (each asking ``requests`` slots, default ``rows``),
    bringing at most ``budget`` payload bytes; each endpoint's walk of its tenants starts
    after ``ring_after`` (``ring_null``: after the deliveries without a tenant)."""
    count = len(endpoint_ids)
    found = conn.execute(queries["claim"], {
        "endpoint_ids": endpoint_ids, "requests": [rows if requests is None else requests] * count,
        "held": [held] * count, "prefetch": [prefetch] * count, "rows": [rows] * count,
        "floors": ["-infinity"] * count,
        "ring_after": [ring_after] * count, "ring_null": [ring_null] * count,
        "ring_steps": RING_STEPS,
        "lease_seconds": lease_seconds, "horizon": horizon, "pace": PACE,
        "budget": budget}).fetchall()
    conn.commit()
    return found


def finish(conn: Conn, row: tuple[Any, ...],
           state: Literal["delivered", "pending", "dead", "released"] = "delivered", *,
           verdict: bool | None = None) -> Completed:
    """Record a claimed row's outcome and free its slot; ``verdict`` True/False tells the
    breaker the endpoint answered / failed. What the complete query wrote comes back."""
    claimed = ClaimRow._make(row)
    record = Record(claimed.id, claimed.lease_token, state, status=200)
    slots = ([[claimed.endpoint_id, claimed.slot, str(claimed.slot_token)]]
             if claimed.slot is not None else [])
    circuits = ([] if verdict is None
                else [[claimed.endpoint_id, int(verdict), int(not verdict), []]])
    return complete(conn, [record], slots, circuits)


def complete(conn: Conn, records: list[Record], slots: list[list[Any]] | None = None,
             circuits: list[list[Any]] | None = None, *, commit: bool = True) -> Completed:
    """The complete statement with these results, as the completer writes them."""
    row = conn.execute(queries["complete"], {
        "results": json.dumps([record.as_row() for record in records]),
        "slots": json.dumps(slots or []), "circuits": json.dumps(circuits or [])}).fetchone()
    if commit:
        conn.commit()
    assert row is not None
    return Completed.from_row(row)
