"""The dispatch loop: claim, deliver, record, within limits and leases.

One claimer task sizes each claim to the free request slots (``--concurrency``
overall, ``--max-in-flight`` and ``--rate-limit`` per endpoint, see
``dispatcher.quota``; an endpoint may hold a second round of claims waiting
in memory, so that one claim serves several rounds) and starts one task per
request (``dispatcher.deliver``). Requests never run inside a transaction: the claim has
committed before the first byte is sent, and the outcome goes to the
:class:`~dispatcher.completer.Completer`, which records it guarded by the
lease token. Leases of everything still held are extended in the background
(``dispatcher.maintenance``), so a slow endpoint never loses its lease while
its request is running.

Stop (SIGTERM/SIGINT): the claimer stops and ``dispatcher.shutdown`` drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dispatcher.completer import Completer, Record
from dispatcher.config import DispatcherConfig
from dispatcher.db import Database, DatabaseDown, Health
from dispatcher.deliver import attempt, decide
from dispatcher.http import HttpSender
from dispatcher.listener import Listener
from dispatcher.metrics import Metrics
from dispatcher.model import Delivery, Endpoint, EventData
from dispatcher.quota import PREFETCH, Quotas
from dispatcher.registry import Registry
from outbox import __version__

log = logging.getLogger("dispatcher")
_LEASE_MARGIN = 15.0
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


class Engine:
    def __init__(self, config: DispatcherConfig, metrics: Metrics, health: Health) -> None:
        self.config = config
        self.metrics = metrics
        self.health = health
        self.registry = Registry(config.environ)
        self.claim_db = Database(config.dsn, health)
        self.complete_db = Database(config.dsn, health)
        self.stopping = asyncio.Event()  # stop claiming
        self.give_up = asyncio.Event()   # stop retrying the database (exit now)
        self.wake = asyncio.Event()
        self.completer = Completer(self.complete_db, self._written, self.give_up)
        self.sender = HttpSender(max_connections=config.concurrency,
                                 block_private_networks=config.block_private_networks,
                                 allow_networks=config.allow_networks,
                                 user_agent=f"outbox-dispatcher/{__version__}")
        self.endpoints_changed = asyncio.Event()  # an endpoint command committed
        self.listener = Listener(config.dsn, self.wake.set,
                                 endpoints_changed=self.endpoints_changed.set)
        self.held: dict[int, uuid.UUID] = {}  # claimed, not yet recorded
        self.slots: dict[int, int] = {}       # requests in flight per endpoint
        # Claimed requests waiting for a slot (see quota.PREFETCH), per endpoint.
        self.waiting: dict[int, deque[tuple[Endpoint, list[Delivery]]]] = {}
        self.requests: dict[asyncio.Task[None], list[Delivery]] = {}
        self.started: set[asyncio.Task[None]] = set()  # requests past the rate limiter
        self.quotas = Quotas()
        self.dead_lettered = 0
        self.recorded = 0
        self.last_tick = 0.0

    # -- claiming -------------------------------------------------------------

    def _lease_seconds(self) -> float:
        longest = max((ep.timeout for ep in self.registry.by_id.values()), default=0.0)
        return max(self.config.lease, longest + _LEASE_MARGIN)

    async def claim_once(self) -> bool:
        """One claim; True when some endpoint filled its quota (more may be due)."""
        held = {ep_id: self.slots.get(ep_id, 0) + len(self.waiting.get(ep_id, ()))
                for ep_id in self.registry.by_id}
        plan = self.quotas.plan(self.registry.active(), held,
                                PREFETCH * self.config.concurrency - sum(held.values()),
                                self.config.batch_size)
        if not plan.endpoint_ids:
            return False
        started = time.monotonic()
        rows = await self.claim_db.fetch("claim", {
            "endpoint_ids": plan.endpoint_ids, "limits": plan.limits,
            "lease_seconds": self._lease_seconds()})
        if time.monotonic() - started > _PARK_AFTER and await self._park(plan.endpoint_ids):
            self.wake.set()  # the next claim walks past what was just parked
        by_endpoint: dict[int, list[Delivery]] = {}
        for row in rows:
            delivery = _delivery(row)
            self.held[delivery.id] = delivery.lease_token
            by_endpoint.setdefault(delivery.endpoint_id, []).append(delivery)
        for endpoint_id, deliveries in by_endpoint.items():
            endpoint = self.registry.by_id[endpoint_id]
            bucket = self.quotas.bucket(endpoint)
            for start in range(0, len(deliveries), endpoint.max_batch):
                # The token is taken now, not when the task runs, so that the
                # next claim already sees it gone.
                group = deliveries[start:start + endpoint.max_batch]
                if bucket is not None:
                    self._start_request(endpoint, group, bucket.take())
                else:
                    self.waiting.setdefault(endpoint.id, deque()).append((endpoint, group))
        self._start_waiting()
        return self.quotas.claimed(plan, {k: len(v) for k, v in by_endpoint.items()})

    async def _park(self, endpoint_ids: list[int]) -> int:
        """Park keyed deliveries stuck behind their key (park_blocked in dispatch.sql)."""
        parked = await self.claim_db.fetch("park_blocked", {
            "endpoint_ids": endpoint_ids, "budget": _PARK_BUDGET})
        if parked:
            log.info("parked %d deliveries waiting behind earlier events of their key",
                     len(parked))
        return len(parked)

    async def claim_loop(self) -> None:
        loop = asyncio.get_running_loop()
        outage = 0.0
        while not self.stopping.is_set():
            self.last_tick = loop.time()
            self.wake.clear()
            recorded = self.recorded
            try:
                more = await self.claim_once()
                outage = 0.0
            except DatabaseDown:
                # Capped, growing pauses while the database is away; wake-ups
                # (finished requests) must not turn into a reconnect storm.
                outage = min(5.0, max(0.1, outage * 2))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), outage)
                continue
            # --once ends when a claim found nothing and nothing it could unblock
            # (a result recorded since that claim began, a rate limit's next
            # token) is outstanding.
            throttled = self.quotas.throttled
            if (self.config.once and not more and not self.requests
                    and not any(self.waiting.values())
                    and not self.completer.pending() and recorded == self.recorded
                    and throttled is None):
                return
            if more and len(self.requests) < self.config.concurrency:
                continue
            wait = self.config.poll_interval
            if throttled is not None:
                wait = min(wait, max(throttled, 0.001))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), wait)

    # -- requests --------------------------------------------------------------

    def _start_request(self, endpoint: Endpoint, deliveries: list[Delivery],
                       delay: float = 0.0) -> None:
        self.slots[endpoint.id] = self.slots.get(endpoint.id, 0) + 1
        task = asyncio.create_task(self._request(endpoint, deliveries, delay))
        self.requests[task] = deliveries
        task.add_done_callback(functools.partial(self._request_done, endpoint_id=endpoint.id))

    def _start_waiting(self) -> None:
        """Start waiting requests while their endpoints and the process have slots."""
        for queue in self.waiting.values():
            while queue and len(self.requests) < self.config.concurrency:
                endpoint, group = queue[0]
                if self.slots.get(endpoint.id, 0) >= endpoint.max_in_flight:
                    break
                queue.popleft()
                self._start_request(endpoint, group)

    def _request_done(self, task: asyncio.Task[None], endpoint_id: int) -> None:
        self.requests.pop(task, None)
        self.started.discard(task)
        self.slots[endpoint_id] -= 1
        if not self.stopping.is_set():
            self._start_waiting()
        self.wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("delivery task failed", exc_info=task.exception())

    async def _request(self, endpoint: Endpoint, deliveries: list[Delivery],
                       delay: float) -> None:
        if delay > 0:  # its turn under the endpoint's rate limit
            await asyncio.sleep(delay)
        task = asyncio.current_task()
        assert task is not None
        self.started.add(task)
        result = await attempt(self.sender, endpoint, deliveries)
        self.metrics.attempt(endpoint.name, result.duration)
        done = datetime.now(UTC)
        disable = False
        for delivery in deliveries:
            decision = decide(delivery, endpoint, result, done, random.random)
            outcome = decision.outcome
            if outcome.action == "delivered":
                self.metrics.delivered(endpoint.name,
                                       (done - delivery.event.created_at).total_seconds())
            else:
                self.metrics.failed(endpoint.name, outcome.reason or "other")
            if outcome.action == "dead":
                self.metrics.dead(endpoint.name)
                self.dead_lettered += 1
                log.warning("delivery of event %s to %s dead-lettered after %d attempts: %s",
                            delivery.event.id, endpoint.name, delivery.attempts,
                            outcome.last_error)
            if decision.retry_in is not None:
                asyncio.get_running_loop().call_later(decision.retry_in, self.wake.set)
            disable = disable or outcome.disable_endpoint
            self.completer.add(decision.record)
        if disable:
            await self._disable(endpoint, "410 Gone")

    async def _disable(self, endpoint: Endpoint, why: str) -> None:
        reason = f"{why} at {datetime.now(UTC).isoformat(timespec='seconds')}"
        log.warning("endpoint %s disabled: %s", endpoint.name, reason)
        try:
            await self.complete_db.fetch("disable_endpoint", {"id": endpoint.id, "reason": reason})
        except DatabaseDown:
            log.warning("could not disable endpoint %s now; it will answer 410 again",
                        endpoint.name)

    def _written(self, batch: list[Record], written: set[int]) -> None:
        self.recorded += len(batch)
        for record in batch:
            self.held.pop(record.delivery_id, None)
        if len(written) < len(batch):
            log.info("%d results discarded: their leases had been taken over",
                     len(batch) - len(written))
        self.wake.set()
