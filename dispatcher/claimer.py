"""The claim loop: take due deliveries in one statement, hand them to requests.

Each claim is sized to the free request slots (``--concurrency`` overall,
``--max-in-flight`` and ``--rate-limit`` per endpoint, see ``policy.quota``;
an endpoint may hold a second round of claims waiting in memory, so that one
claim serves several rounds) and its groups go to :class:`~dispatcher.flights.Flights`.
Requests never run inside a transaction: the claim has committed before the
first byte is sent, and every later write is guarded by the lease token.

The loop runs until told to stop, waking on a notification, a finished
request, a retry coming due or the poll interval; with ``--once`` it ends
when nothing it could still unblock is outstanding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from dispatcher.completer import Completer
from dispatcher.control import Control
from dispatcher.db import Database, DatabaseDown
from dispatcher.flights import Flights
from dispatcher.leases import Leases
from dispatcher.policy.model import Delivery, EventData
from dispatcher.policy.quota import PREFETCH, Quotas
from dispatcher.registry import Registry

log = logging.getLogger("dispatcher")
# A claim slower than this is taken as a walk over keyed rows that wait behind
# their key; they are parked, at most _PARK_BUDGET rows looked at a time.
_PARK_AFTER = 0.05
_PARK_BUDGET = 5000


def _delivery(row: Sequence[Any]) -> Delivery:
    (delivery_id, endpoint_id, attempts, token, event_id, type_, key, payload,
     headers, created_at) = row
    return Delivery(id=delivery_id, endpoint_id=endpoint_id, attempts=attempts,
                    lease_token=token,
                    event=EventData(id=event_id, type=type_, key=key, payload=payload,
                                    headers=json.loads(headers or "{}"),
                                    created_at=created_at))


class Claimer:
    """Claims due deliveries and starts their requests, until stopped (or, --once, done)."""

    def __init__(self, *, db: Database, registry: Registry, flights: Flights, leases: Leases,
                 completer: Completer, control: Control, concurrency: int, batch_size: int,
                 poll_interval: float, once: bool) -> None:
        self._db = db
        self._registry = registry
        self._flights = flights
        self._leases = leases
        self._completer = completer
        self._control = control
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._poll_interval = poll_interval
        self._once = once
        self._quotas = Quotas(time.monotonic)

    async def claim_once(self) -> bool:
        """One claim; True when some endpoint filled its quota (more may be due)."""
        flights = self._flights
        held = {ep_id: flights.held(ep_id) for ep_id in self._registry.by_id}
        plan = self._quotas.plan(self._registry.active(), held,
                                 PREFETCH * self._concurrency - sum(held.values()),
                                 self._batch_size)
        if not plan.endpoint_ids:
            return False
        started = time.monotonic()
        rows = await self._db.fetch("claim", {
            "endpoint_ids": plan.endpoint_ids, "limits": plan.limits,
            "lease_seconds": self._leases.seconds()})
        if time.monotonic() - started > _PARK_AFTER and await self._park(plan.endpoint_ids):
            self._control.wake.set()  # the next claim walks past what was just parked
        by_endpoint: dict[int, list[Delivery]] = {}
        for row in rows:
            delivery = _delivery(row)
            self._leases.hold(delivery)
            by_endpoint.setdefault(delivery.endpoint_id, []).append(delivery)
        for endpoint_id, deliveries in by_endpoint.items():
            endpoint = self._registry.by_id[endpoint_id]
            bucket = self._quotas.bucket(endpoint)
            for start in range(0, len(deliveries), endpoint.max_batch):
                group = deliveries[start:start + endpoint.max_batch]
                if bucket is not None:
                    # The token is taken now, not when the request runs, so that
                    # the next claim already sees it gone.
                    flights.start(endpoint, group, bucket.take())
                else:
                    flights.queue(endpoint, group)
        flights.start_waiting()
        return self._quotas.claimed(plan, {k: len(v) for k, v in by_endpoint.items()})

    async def _park(self, endpoint_ids: list[int]) -> int:
        """Park keyed deliveries stuck behind their key (park_blocked in dispatch.sql)."""
        parked = await self._db.fetch("park_blocked", {
            "endpoint_ids": endpoint_ids, "budget": _PARK_BUDGET})
        if parked:
            log.info("parked %d deliveries waiting behind earlier events of their key",
                     len(parked))
        return len(parked)

    def _once_done(self, more: bool, written_before: int) -> bool:
        """--once ends when a claim found nothing, and nothing it could unblock is outstanding:
        no request, no result unwritten or written since that claim began, no rate-limit wait."""
        return (not more and self._flights.idle() and not self._completer.pending()
                and written_before == self._completer.written
                and self._quotas.throttled is None)

    async def run(self) -> None:
        control = self._control
        outage = 0.0
        while not control.stopping.is_set():
            control.heartbeat.beat()
            control.wake.clear()
            written = self._completer.written
            try:
                more = await self.claim_once()
                outage = 0.0
            except DatabaseDown:
                # Capped, growing pauses while the database is away; wake-ups
                # (finished requests) must not turn into a reconnect storm.
                outage = min(5.0, max(0.1, outage * 2))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(control.stopping.wait(), outage)
                continue
            if self._once and self._once_done(more, written):
                return
            if more and self._flights.requests() < self._concurrency:
                continue
            wait = self._poll_interval
            throttled = self._quotas.throttled
            if throttled is not None:
                wait = min(wait, max(throttled, 0.001))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(control.wake.wait(), wait)
