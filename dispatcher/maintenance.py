"""Background upkeep of a running dispatcher: its own, and the fleet's by one of them.

Each dispatcher keeps up what is its own:

- endpoints: reload every few seconds, and at once when an endpoint command
  notifies a change (outbox_endpoints);
- leases: extend those of every delivery and request slot it holds, well
  before they expire;
- heartbeat: its row in outbox.dispatchers, with the endpoints it cannot
  serve (a secret it cannot read), for ``outbox status``.

The fleet's upkeep is done by one dispatcher at a time, whoever holds the
maintainer lease (``maintainer_lease`` in dispatch.sql: a row, renewed every
few seconds on the database clock, taken over by another dispatcher once it
expires, so within seconds of its holder dying or freezing; a lease rather
than a session advisory lock, which a frozen process would keep for ever):

- rescue: expired leases of dead or frozen dispatchers back to pending;
- sweep: deliveries of removed endpoints buried, orphaned parked rows unparked;
- policies: what an endpoint's policy discards (``--when-full drop-oldest``
  past a bound, everything at an endpoint disabled with ``--drop``), every
  second, and dead letters kept longer than ``--keep-dead``, every minute;
  each counted in ``outbox_dropped_total``. Only while some endpoint has such
  a policy (the endpoint view knows): otherwise no statement at all;
- retention: old finished rows purged in small batches.

Fifty idle sidecars then cost one sidecar's sweeps, not fifty. Each step
tolerates a database outage: it is skipped and tried next period.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import psycopg

from dispatcher.config import DispatcherConfig
from dispatcher.db import Database, DatabaseDown, connect
from dispatcher.endpoint_view import EndpointView
from dispatcher.leases import Leases
from dispatcher.limits.slots import slots_json
from dispatcher.observe.metrics import Metrics
from dispatcher.policy.model import TlsFiles
from outbox._shared.text import counted, first_line
from outbox._shared.version import current as version
from outbox.retention import apurge

log = logging.getLogger("dispatcher.maintenance")
ENDPOINT_REFRESH = 5.0
RETENTION_PERIOD = 60.0
DISCARD_PERIOD = 1.0
"""Seconds between two rounds of the endpoints' discarding policies on the maintainer: a
backlog past its drop-oldest bound is back within it about this long after the commit that
passed it (the promise is 5 s; the rest is room for a slow round and a busy machine)."""
EXPIRE_BATCH = 1000
"""Dead letters discarded per endpoint and statement by ``--keep-dead``."""
MAINTAINER_LEASE = 10.0
"""Seconds the maintainer lease lasts; renewed every MAINTAINER_RENEW seconds."""
MAINTAINER_RENEW = 3.0
HEARTBEAT = 5.0
"""Seconds between two heartbeats of this process (``outbox status`` counts those seen
in the last 30 s)."""


@dataclass(slots=True)
class _Step:
    period: float
    run: Callable[[], Awaitable[None]]
    fleet: bool  # only the maintainer runs it
    due: float = 0.0


class Maintenance:
    def __init__(self, config: DispatcherConfig, *, db: Database, endpoints: EndpointView,
                 metrics: Metrics, leases: Leases, wake: Callable[[], None],
                 endpoints_changed: asyncio.Event,
                 tls_problems: Callable[[], Mapping[TlsFiles, str]] = dict) -> None:
        """``wake``: tell the claimer something came due (rescued or unparked deliveries);
        ``endpoints_changed``: set by the listener when an endpoint command committed;
        ``tls_problems``: the endpoints' TLS files this process could not use, for the
        heartbeat."""
        self._tls_problems = tls_problems
        self._config = config
        self._db = db
        self._endpoints = endpoints
        self._metrics = metrics
        self._leases = leases
        self._wake = wake
        self._endpoints_changed = endpoints_changed
        self._me = uuid.uuid4()
        self._beating = False
        self.maintainer = False
        lease = config.lease
        self._steps = [
            _Step(ENDPOINT_REFRESH, self.refresh_endpoints, fleet=False),
            _Step(max(0.5, lease / 3), self.extend_leases, fleet=False),
            _Step(MAINTAINER_RENEW, self.contend, fleet=False),
            _Step(HEARTBEAT, self.beat, fleet=False),
            _Step(max(0.5, min(lease / 2, 10.0)), self.rescue, fleet=True),
            _Step(ENDPOINT_REFRESH, self.sweep, fleet=True),
            _Step(DISCARD_PERIOD, self.discard, fleet=True),
            _Step(RETENTION_PERIOD, self.expire_dead, fleet=True),
        ]
        if config.retention.total_seconds() > 0:
            self._steps.append(_Step(RETENTION_PERIOD, self.purge, fleet=True))

    async def refresh_endpoints(self) -> None:
        """Read again the endpoints that changed; one row when none did (``EndpointView``)."""
        endpoints = self._endpoints
        [(digest, now)] = await self._db.fetch("endpoints_fingerprint")
        if endpoints.current(digest, now):
            return
        versions = dict(await self._db.fetch("endpoint_versions"))
        stale = endpoints.stale(versions, now)
        rows = await self._db.fetch("load_endpoints", {"ids": stale}) if stale else []
        self._metrics.known_endpoints(endpoints.update(digest, versions, rows))

    async def extend_leases(self) -> None:
        ids, tokens, slots = self._leases.held()
        if ids or slots:
            await self._db.fetch("extend_leases", {
                "ids": ids, "tokens": tokens, "slots": slots_json(slots),
                "lease_seconds": self._leases.seconds()})

    async def contend(self) -> None:
        """Take or keep the maintainer lease; the fleet's steps run only while it is held."""
        held = bool(await self._db.fetch("maintainer_lease", {
            "me": self._me, "seconds": MAINTAINER_LEASE}))
        if held != self.maintainer:
            log.info("%s the fleet's maintainer", "now" if held else "no longer")
            if held:  # a new maintainer catches up at once
                for step in self._steps:
                    if step.fleet:
                        step.due = 0.0
        self.maintainer = held

    async def beat(self) -> None:
        """This process is alive, and these endpoints it cannot serve (``outbox status``)."""
        problems = self._endpoints.problems(self._tls_problems())
        await self._db.fetch("heartbeat", {
            "me": self._me, "host": socket.gethostname(), "pid": os.getpid(),
            "version": version(), "problems": json.dumps(problems)})
        self._beating = True

    async def resign(self) -> None:
        """Hand the maintainer lease on at once, and take this process off the list of
        the living (a graceful stop)."""
        if self._beating:
            with contextlib.suppress(DatabaseDown):
                await self._db.fetch("heartbeat_stop", {"me": self._me})
            self._beating = False
        if self.maintainer:
            with contextlib.suppress(DatabaseDown):
                await self._db.fetch("maintainer_resign", {"me": self._me})
            self.maintainer = False

    async def rescue(self) -> None:
        rows = await self._db.fetch("rescue_expired")
        if rows:
            log.warning("%s had expired leases and are pending again",
                        counted(len(rows), "delivery", "deliveries"))
            self._wake()

    async def sweep(self) -> None:
        await self._db.fetch("bury_removed")
        await self._db.fetch("heartbeat_sweep")
        if await self._db.fetch("unpark_orphans"):
            self._wake()

    async def discard(self) -> None:
        """Apply the endpoints' discarding policies (``discard_over``); nothing to run while
        no endpoint has one."""
        ids = self._endpoints.discarding()
        if ids:
            rows = await self._db.fetch("discard_over", {"ids": ids})
            for endpoint_id, reason, count in rows:
                self._metrics.dropped(self._endpoints.describe(endpoint_id), reason, int(count))

    async def expire_dead(self) -> None:
        """Discard the dead letters kept past their endpoint's ``--keep-dead``, a batch per
        endpoint and statement until none is full; nothing to run while no endpoint has one."""
        ids = self._endpoints.keeping_dead()
        while ids:
            rows = await self._db.fetch("expire_dead", {"ids": ids,
                                                        "batch_size": EXPIRE_BATCH})
            for endpoint_id, count in rows:
                self._metrics.dropped(self._endpoints.describe(endpoint_id), "dead-expired",
                                      int(count))
            ids = [int(endpoint_id) for endpoint_id, count in rows if count >= EXPIRE_BATCH]

    async def purge(self) -> None:
        """The same code as `outbox purge`, on a connection of its own: its batches are
        short transactions, and the maintenance connection stays free meanwhile."""
        try:
            async with await connect(self._config.dsn, "retention") as conn:
                result = await apurge(conn, self._config.retention)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise DatabaseDown(first_line(exc)) from exc
        if result.deliveries or result.events:
            log.info("retention purged %s and %s",
                     counted(result.deliveries, "delivery", "deliveries"),
                     counted(result.events, "event"))

    async def run(self) -> None:
        """Run each step on its period until cancelled; the fleet's only as maintainer."""
        start = time.monotonic()
        for step in self._steps:
            step.due = start if step.run == self.contend else start + step.period
        while True:
            now = time.monotonic()
            for step in self._steps:
                if now >= step.due and (self.maintainer or not step.fleet):
                    step.due = now + step.period
                    try:
                        await step.run()
                    except DatabaseDown:
                        if step.run == self.contend:
                            self.maintainer = False  # cannot tell: assume another took over
                    except psycopg.Error:
                        log.exception("maintenance step %s failed", step.run.__name__)
            changed = self._endpoints_changed
            due = [s.due for s in self._steps if self.maintainer or not s.fleet]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(0.05, min(due) - time.monotonic()))
            if changed.is_set():  # reload the endpoints now, not at their next period
                changed.clear()
                self._steps[0].due = 0.0
