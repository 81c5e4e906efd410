"""The documented ``--json`` shapes of the reading commands, one function each.

``outbox status``, ``dead list``, ``show`` and ``events list`` print these,
and ``outbox web`` answers them at ``?format=json``: one function per shape,
so that a script reading either gets the same document for the same rows.
Times are RFC 3339 strings (UTC, with a Z).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from outbox import admin, history
from outbox._shared import times


def rfc3339(moment: datetime | None, *, seconds: bool = False) -> str | None:
    """UTC, RFC 3339 with a Z: 2024-05-01T12:00:00.123456Z (``seconds``: without the
    fraction); None stays None, for the columns a row may leave empty."""
    if moment is None:
        return None
    return times.rfc3339(moment, timespec="seconds" if seconds else "auto")


_TABLES_ONLY = frozenset({"discarded", "tenant"})
"""Fields of :class:`admin.EndpointStatus` the tables show and ``status --json`` does not."""


def status(result: admin.Status, holder: admin.HorizonHolder | None,
           backlogs: Sequence[admin.TenantBacklog] | None = None) -> dict[str, Any]:
    """``status --json`` (``backlogs``: with ``--tenants``)."""
    shown: dict[str, Any] = {
        # The endpoints' keys are the documented ones and those the project added before;
        # the count of discarded deliveries and the tenant are the tables' only.
        "endpoints": [{k: v for k, v in asdict(e).items() if k not in _TABLES_ONLY}
                      for e in result.endpoints],
        "unrouted": result.unrouted,
        "dispatchers": result.dispatchers,
        "served_by": [asdict(s) for s in result.served_by],
        "horizon": None if holder is None else asdict(holder),
    }
    if backlogs is not None:
        shown["tenants"] = [asdict(b) for b in backlogs]
    return shown


def dead_letters(letters: Sequence[admin.DeadLetter]) -> list[dict[str, Any]]:
    """``dead list --json``: each whole last_error, as masked when it was recorded."""
    return [{
        "event_id": d.event_id, "endpoint": d.endpoint, "type": d.type, "key": d.key,
        "attempts": d.attempts, "last_error": d.last_error, "last_status": d.last_status,
        "failed_at": rfc3339(d.failed_at), "created_at": rfc3339(d.created_at),
        "tenant": d.tenant,
    } for d in letters]


def events(found: Sequence[admin.EventLine]) -> list[dict[str, Any]]:
    """``events list --json``."""
    return [{
        "event_id": e.event_id, "type": e.type, "key": e.key, "tenant": e.tenant,
        "created_at": rfc3339(e.created_at), "deliveries": e.deliveries,
    } for e in found]


def story(told: history.EventStory, *, payload: bool = False) -> dict[str, Any]:
    """``show --json`` (``payload``: with ``--payload``, the event's data as published)."""
    shown: dict[str, Any] = {
        "event_id": told.event_id, "type": told.type, "key": told.key,
        "tenant": told.tenant, "created_at": rfc3339(told.created_at),
        "trace_id": told.trace_id,
        "deliveries": history.delivery_dicts(told.deliveries, rfc3339),
    }
    if payload:
        shown["payload"] = json.loads(told.payload)
    return shown


__all__ = ["dead_letters", "events", "rfc3339", "status", "story"]
