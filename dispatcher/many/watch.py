"""Watching a database served by no pinned connection: its gauges, and who serves it.

A database without recent work is looked at about once a minute (the sweep,
``--sweep-interval``) through one short-lived connection (``probe``). On that
same connection the look measures what the backlog gauges report (the
``backlog`` and ``horizon`` queries, as a lone dispatcher's scrape does), so
that a change in an idle database (an endpoint disabled, an event waiting)
shows on ``/metrics`` within one sweep and the alerts fire for it as for a
busy one; and it writes this process's row in ``outbox.dispatchers``
(``served_by``), which vouches until the next look is well overdue that a
live dispatcher serves the database: ``outbox status`` names it there
instead of saying that nothing is delivered. A database with pinned
connections is measured the same way, every :data:`~dispatcher.many.supervisor.BACKLOG_EVERY`
seconds, beside the heartbeat its own upkeep writes.
"""

from __future__ import annotations

import os
import random
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from dispatcher.db import Database, DatabaseDown, Health
from outbox._shared.version import current as version

MARGIN = 30.0
"""Seconds a look's row vouches for the database beyond the next look's due time: room
for a look delayed by a busy budget or a slow server."""


@dataclass(frozen=True, slots=True)
class Watcher:
    """This process as its rows in ``outbox.dispatchers`` name it (one id in every
    database it looks at), and how long a row vouches for a database."""

    every: float
    """Seconds between two looks at an idle database (the sweep; 0: no regular look)."""
    me: uuid.UUID = field(default_factory=uuid.uuid4)
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    def row(self) -> dict[str, Any]:
        """The parameters of ``served_by``."""
        return {"me": self.me, "host": self.host, "pid": self.pid, "version": version(),
                "seconds": self.every + MARGIN}


@dataclass(frozen=True, slots=True)
class Measured:
    """The rows of the ``backlog`` and ``horizon`` queries, for
    :meth:`~dispatcher.observe.metrics.Metrics.measured`."""

    backlog: Sequence[tuple[Any, ...]]
    horizon: tuple[Any, ...] | None


async def measure(db: Database, watcher: Watcher) -> Measured:
    """Measure the gauges through ``db`` and vouch for the database; raises as
    :meth:`Database.fetch` does."""
    backlog = await db.fetch("backlog")
    horizon = await db.fetch("horizon")
    await db.fetch("served_by", watcher.row())
    return Measured(backlog, horizon[0] if horizon else None)


async def measure_once(dsn: str, watcher: Watcher) -> Measured | None:
    """:func:`measure` through a connection of its own, closed before it returns; None
    when the database did not answer (a gauge not refreshed is only stale)."""
    db = Database(dsn, Health(quiet=True), "metrics")
    try:
        return await measure(db, watcher)
    except (DatabaseDown, psycopg.Error):
        return None
    finally:
        await db.close()


def next_look(now: float, began: float, due_in: float | None, sweep: float, *,
              first: bool) -> float:
    """When to look again at a database without recent work, whose look began at ``began``
    and found its next delivery due in ``due_in`` seconds (None: nothing waits).

    At the latest one sweep after that look began, so that its gauges are never older
    than a sweep and a look costs one connection per sweep; after a database's first
    look (``first``), the next waits a random part of the sweep instead, so that the
    looks of databases listed together spread over the sweep rather than come all at
    once, every time.
    """
    wait = float("inf") if due_in is None else now + due_in - began
    if sweep > 0:
        wait = min(wait, sweep * random.uniform(0.5, 1.0) if first else sweep)  # noqa: S311
    return began + wait
