"""Background upkeep of a running dispatcher, each on its own period.

- endpoints: reload every few seconds, and at once when an endpoint command
  notifies a change (outbox_endpoints);
- leases: extend those of every delivery still held (in flight, or finished
  and waiting to be recorded), well before they expire;
- rescue: expired leases of dead or frozen dispatchers back to pending;
- retention: purge old finished rows in small batches.

Each step tolerates a database outage: it is skipped and tried next period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import psycopg

from dispatcher.config import DispatcherConfig
from dispatcher.control import Control
from dispatcher.db import Database, DatabaseDown, connect
from dispatcher.leases import Leases
from dispatcher.observe.metrics import Metrics
from dispatcher.registry import Registry
from outbox._shared.text import first_line
from outbox.retention import apurge

log = logging.getLogger("dispatcher.maintenance")
ENDPOINT_REFRESH = 5.0
RETENTION_PERIOD = 60.0


class Maintenance:
    def __init__(self, config: DispatcherConfig, *, db: Database, registry: Registry,
                 metrics: Metrics, leases: Leases, control: Control) -> None:
        self._config = config
        self._db = db
        self._registry = registry
        self._metrics = metrics
        self._leases = leases
        self._control = control
        lease = config.lease
        self.periods: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            (ENDPOINT_REFRESH, self.refresh_endpoints),
            (max(0.5, lease / 3), self.extend_leases),
            (max(0.5, min(lease / 2, 10.0)), self.rescue),
        ]
        if config.retention.total_seconds() > 0:
            self.periods.append((RETENTION_PERIOD, self.purge))

    async def refresh_endpoints(self) -> None:
        await self._db.fetch("bury_removed")
        if await self._db.fetch("unpark_orphans"):
            self._control.wake.set()
        rows = await self._db.fetch("load_endpoints")
        self._registry.load(rows)
        self._metrics.known_endpoints(self._registry.names())

    async def extend_leases(self) -> None:
        ids, tokens = self._leases.held()
        if ids:
            await self._db.fetch("extend_leases", {
                "ids": ids, "tokens": tokens, "lease_seconds": self._leases.seconds()})

    async def rescue(self) -> None:
        rows = await self._db.fetch("rescue_expired")
        if rows:
            log.warning("%d deliveries had expired leases and are pending again", len(rows))
            self._control.wake.set()

    async def purge(self) -> None:
        """The same code as `outbox purge`, on a connection of its own: its batches are
        short transactions, and the maintenance connection stays free meanwhile."""
        try:
            async with await connect(self._config.dsn) as conn:
                result = await apurge(conn, self._config.retention)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise DatabaseDown(first_line(exc)) from exc
        if result.deliveries or result.events:
            log.info("retention purged %d deliveries and %d events",
                     result.deliveries, result.events)

    async def run(self) -> None:
        """Run each step on its period until cancelled."""
        due = [time.monotonic() + period for period, _ in self.periods]
        while True:
            now = time.monotonic()
            for i, (period, step) in enumerate(self.periods):
                if now >= due[i]:
                    due[i] = now + period
                    try:
                        await step()
                    except DatabaseDown:
                        pass
                    except psycopg.Error:
                        log.exception("maintenance step %s failed", step.__name__)
            changed = self._control.endpoints_changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(0.05, min(due) - time.monotonic()))
            if changed.is_set():  # reload the endpoints now, not at their next period
                changed.clear()
                due[0] = 0.0
