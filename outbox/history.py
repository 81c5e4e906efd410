"""One event's whole story, for ``outbox show``: its deliveries and every attempt made.

The dispatcher writes a row of ``outbox.attempts`` per failed attempt, in
the statement that records the attempt's result; a successful attempt adds
no row, since the delivery itself keeps what there is to say of it
(``finished_at``, ``last_status``, ``last_duration_seconds``). :func:`show`
puts the two together: per endpoint, the state of its latest delivery and
the attempts of all its deliveries (a replay adds a delivery; its attempts
go on counting), oldest first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from outbox._shared.pinned import pinned
from outbox.errors import EventsNotFound
from outbox.sql import queries

__all__ = ["Attempt", "DeliveryStory", "EventStory", "delivery_dicts", "show", "stories",
           "trace_id"]


@dataclass(frozen=True)
class Attempt:
    """One attempt: ``reason`` is None for a success, else a failure reason of the metrics."""

    attempt: int
    at: datetime
    status: int | None
    reason: str | None
    duration_seconds: float | None
    error: str | None


@dataclass(frozen=True)
class DeliveryStory:
    """What became of the event at one endpoint."""

    endpoint: str
    endpoint_removed: bool
    state: str
    attempts: int
    """Attempts over the delivery's whole life (retries and replays go on counting)."""
    next_attempt_at: datetime | None
    """When the next attempt is due (pending only); None also while it waits for its key."""
    waiting_for_key: bool
    """Pending behind an earlier event of its key that is not finished yet."""
    last_error: str | None
    last_status: int | None
    history: tuple[Attempt, ...]


@dataclass(frozen=True)
class EventStory:
    event_id: str
    type: str
    key: str | None
    created_at: datetime
    trace_id: str | None
    deliveries: tuple[DeliveryStory, ...]
    payload: str = "null"  # the event's data as JSON text, as stored
    tenant: str | None = None  # the tenant it was published for; None: none


def trace_id(traceparent: str | None) -> str | None:
    """The 32-hex-digit trace id of a W3C ``traceparent`` (``00-<trace>-<span>-<flags>``)."""
    if not traceparent:
        return None
    parts = traceparent.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32:
        return None
    try:
        int(parts[1], 16)
    except ValueError:
        return None
    return None if set(parts[1]) == {"0"} else parts[1].lower()


def show(conn: psycopg.Connection[Any], event_id: uuid.UUID) -> EventStory:
    """The event's story; an unknown id raises :class:`~outbox.errors.EventsNotFound`."""
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        event = cur.execute(queries["show_event"], {"event_id": event_id}).fetchone()
        if event is None:
            raise EventsNotFound([str(event_id)])
        rows = cur.execute(queries["show_deliveries"],
                           {"event_id": event_id, "as_tenant": None}).fetchall()
        failed = cur.execute(queries["show_attempts"],
                             {"delivery_ids": [r[0] for r in rows]}).fetchall()
    ev_id, ev_type, key, created_at, traceparent, payload, tenant = event
    return EventStory(str(ev_id), ev_type, key, created_at, trace_id(traceparent),
                      stories(rows, failed), payload, tenant)


def stories(rows: Sequence[Sequence[Any]],
            failed: Sequence[Sequence[Any]]) -> tuple[DeliveryStory, ...]:
    """Per endpoint, what became of the event: from the rows of ``show_deliveries`` and
    ``show_attempts`` (as tuples), in their order."""
    by_delivery: dict[int, list[Attempt]] = {}
    for delivery_id, number, at, status, reason, duration, error in failed:
        by_delivery.setdefault(int(delivery_id), []).append(
            Attempt(int(number), at, status, reason, duration, error))
    by_endpoint: dict[str, list[Sequence[Any]]] = {}
    for row in rows:
        by_endpoint.setdefault(str(row[1]), []).append(row)
    return tuple(_story(name, group, by_delivery) for name, group in by_endpoint.items())


def _same(moment: datetime | None) -> Any:
    return moment


def delivery_dicts(deliveries: Sequence[DeliveryStory],
                   time: Callable[[datetime | None], Any] = _same) -> list[dict[str, Any]]:
    """``show --json``'s ``deliveries`` list; ``time`` writes each time (as it is: a
    datetime, for ``outbox.endpoints.attempts``; RFC 3339 text, for the command)."""
    return [{
        "endpoint": d.endpoint, "state": d.state, "attempts": d.attempts,
        "next_attempt_at": time(d.next_attempt_at), "last_error": d.last_error,
        "last_status": d.last_status,
        "history": [{
            "attempt": a.attempt, "at": time(a.at), "status": a.status,
            "reason": a.reason, "duration_seconds": a.duration_seconds, "error": a.error,
        } for a in d.history],
    } for d in deliveries]


def _story(name: str, group: Sequence[Sequence[Any]],
           failed: dict[int, list[Attempt]]) -> DeliveryStory:
    """One endpoint's block: its deliveries in id order, the latest giving the state."""
    history: list[Attempt] = []
    for (delivery_id, _, _, state, attempts, _, _, status, finished_at, duration, _) in group:
        history += failed.get(int(delivery_id), [])
        if state == "delivered" and finished_at is not None:
            history.append(Attempt(int(attempts), finished_at, status, None, duration, None))
    history.sort(key=lambda a: (a.at, a.attempt))
    (_, _, removed, state, attempts, next_at, last_error, last_status, _, _, parked) = group[-1]
    waiting = state == "pending" and bool(parked)
    due = next_at if state == "pending" else None
    return DeliveryStory(name, bool(removed), state, int(attempts), due, waiting, last_error,
                         last_status, tuple(history))
