"""The claim loop: take due deliveries in one statement, hand them to requests.

Each claim first learns which endpoints have due work (``limits.walk``: the
``due_endpoints`` statement from the cursor of their turns; a walk's findings
serve the claims of the next few milliseconds), then asks those, and the endpoints with requests
running here, for what this dispatcher could use (``limits.quota``: request
slots dealt in turns, a round of prefetch, a row cap), and the claim
statement grants what the fleet's limits allow: slots under
``--max-in-flight``, turns under ``--rate-limit``, one probe or none while a
circuit is open. Groups that got a slot start at once (after their turn);
the others wait in :class:`~dispatcher.flights.Flights` for a slot passed on
by a request that ends. Requests never run inside a transaction: the claim
has committed before the first byte is sent, and every later write is
guarded by the lease token.

The loop runs until told to stop, waking on a notification, a finished
request, a retry coming due, a rate limit's next turn or the poll interval;
with ``--once`` it ends when nothing it could still unblock is outstanding.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from dispatcher.db import Database, DatabaseDown
from dispatcher.endpoint_view import EndpointView
from dispatcher.flights import Flights, Group
from dispatcher.leases import Leases
from dispatcher.limits import keys, rate
from dispatcher.limits.quota import BATCH_BYTES, HELD_BYTES, Plan, Quotas
from dispatcher.limits.ring import Ring
from dispatcher.limits.slots import SPARE_LINGER, SlotBook
from dispatcher.limits.walk import Step, Walk
from dispatcher.policy.floors import Floors
from dispatcher.policy.model import ClaimRow, Endpoint, Slot

log = logging.getLogger("dispatcher")
CLAIM_GAP = 0.005
"""Seconds at least between the starts of two claims of one dispatcher after a lean one
(fewer than LEAN_CLAIM rows). Requests ending one by one would otherwise each wake a claim
for a slot or two: the gap gathers them, so that a fleet of dispatchers sharing an
endpoint's slots makes few large claims rather than many small ones. After a rich claim
the next one goes at once: a lone dispatcher's prefetched round may last less than the gap."""
LEAN_CLAIM = 8
PassOver = Callable[[bool, bool], bool]
"""--once's end, asked after each claim: given whether that claim may have left more due
and whether a rate-limit turn is awaited, True when the pass is over (``OncePass.over``)."""


@dataclass(slots=True)
class _Claimed:
    """One claim's rows, as the groups (requests) they form."""

    groups: list[Group] = field(default_factory=list)
    rows: dict[int, int] = field(default_factory=dict)  # per endpoint
    size: int = 0  # payload bytes, in all
    throttled: float | None = None  # seconds until a busy rate-limited endpoint's next turn


class Claimer:
    """Claims due deliveries and starts their requests, until stopped (or, --once, done)."""

    def __init__(self, *, db: Database, endpoints: EndpointView, flights: Flights, leases: Leases,
                 slots: SlotBook, wake: asyncio.Event, stopping: asyncio.Event,
                 beat: Callable[[], None], concurrency: int, batch_size: int,
                 poll_interval: float, pass_over: PassOver | None = None) -> None:
        """``slots``: the slots held, where those a claim grants are entered (the book
        maintenance extends and the completer empties); ``wake``: set when something may
        be due (the claimer clears and waits on it); ``stopping``: claim no more;
        ``beat``: the liveness heartbeat, called each turn; ``pass_over``: with --once,
        asked after each claim whether the pass is over."""
        self._db = db
        self._endpoints = endpoints
        self._flights = flights
        self._leases = leases
        self._slots = slots
        self._wake = wake
        self._stopping = stopping
        self._beat = beat
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._poll_interval = poll_interval
        self._pass_over = pass_over
        self._quotas = Quotas()
        self._walk = Walk(endpoints.usable, want=concurrency)
        self._floors = Floors()
        self._ring = Ring()
        self._rate_turns = rate.Turns()
        self._throttled: float | None = None
        self.claims = 0  # claim statements run (with --databases: has it looked yet?)
        self._lean = False  # the last claim took fewer than LEAN_CLAIM rows
        self._row_bytes = 0.0  # payload bytes per row of the last claim that took any
        self._may_skip_walk = True  # the next stale walk may wait one claim (_plan)
        self._unwalked = False  # the claim under way skipped a stale walk

    async def claim_once(self) -> bool:
        """One claim; True when some endpoint filled its quota (more may be due).

        Bracketed from before the walk for due work to the claim's end, so
        that slots of requests ending meanwhile wait for what the claim brings
        (``Flights.claiming``) and the plan counts them as held.

        No claim while the groups held here carry HELD_BYTES of payloads: the
        requests that end wake the next one.
        """
        flights = self._flights
        if self._walk.more and flights.requests() >= self._concurrency:
            # Every request slot of this process busy, and more endpoints with work
            # than it can serve: the plan would give no slot and prefetch nothing (see
            # ``Quotas.plan``), so no walk either. A request ending with a successor
            # waiting wakes the claimer and changes none of that; one that ends
            # without frees a place, and the claim after it looks again. Slots kept
            # spare for SPARE_LINGER go back to the fleet meanwhile, as after a claim.
            flights.claim_ended()
            return False
        budget = HELD_BYTES - flights.held_bytes()
        if budget <= 0:
            return False
        with flights.claiming():
            plan = await self._plan(budget)
            self._throttled = None
            if not plan.endpoint_ids:
                return False
            started = time.monotonic()
            claimed = self._group(await self._claim(plan, budget, started), started)
            for group in claimed.groups:
                if group.slot is not None:
                    self._slots.hold(group.slot)
                    flights.start(group)
                else:
                    flights.queue(group)
        self._throttled = claimed.throttled
        self._walk.ran_dry(plan.endpoint_ids, claimed.rows)
        if (time.monotonic() - started > keys.PARK_AFTER
                and await keys.park(self._db, plan.endpoint_ids)):
            self._wake.set()  # the next claim walks past what was just parked
        self._measure(claimed)
        # Cut short by the byte budget, the claim may have left due rows behind; or it
        # asked the endpoints with spare slots only (_plan), and the walk is still due.
        return (self._quotas.claimed(plan, claimed.rows) or claimed.size >= budget
                or self._unwalked)

    async def _plan(self, budget: int) -> Plan:
        """What to ask each endpoint for: those with due work, and those busy here.

        A fresh walk for due work (``limits.walk``) when the last one is stale;
        the cursor then moves past the endpoints the plan gives a request slot.
        """
        walk = self._walk
        now = time.monotonic()
        self._unwalked = False
        if (self._may_skip_walk and walk.stale(now) and not walk.due and not walk.more
                and self._flights.spares()):
            # Slots kept spare here: their endpoints were served a moment ago, and a
            # lone event that wakes the claimer is most often for one of them. The
            # claim asks those alone, a round trip sooner (idle latency); the claim
            # right after walks as usual (``claim_once``), for the other endpoints.
            plan = self._size([], False, budget)
            if plan.endpoint_ids:
                self._unwalked = True
                self._may_skip_walk = False
                return plan
        if walk.stale(now):
            self._may_skip_walk = True
            floor_ids, floors = self._floors.for_walk(now)
            await walk.look(now, functools.partial(self._due_endpoints, floor_ids, floors))
        plan = self._size(walk.due, walk.more, budget)
        if plan.starved and self._flights.give_back_spares():
            plan = self._size(walk.due, walk.more, budget)
        walk.served(plan.endpoint_ids, plan.requests)
        return plan

    async def _due_endpoints(self, floor_ids: list[int], floors: list[datetime], after: int,
                             steps: int) -> Sequence[Step]:
        """One run of the walk for due work, from ``after``, looking from ``floors``."""
        return await self._db.fetch("due_endpoints", {
            "after": after, "want": self._concurrency, "budget": steps,
            "horizon": rate.RATE_HORIZON, "floor_ids": floor_ids, "floors": floors})

    def _size(self, due: list[Endpoint], more_due: bool, budget: int) -> Plan:
        """The plan for ``due`` and the endpoints with requests running here."""
        running, waiting = self._flights.counts()
        seen = {ep.id for ep in due}
        busy = [ep for ep_id in running
                if ep_id not in seen and (ep := self._endpoints.usable(ep_id)) is not None]
        return self._quotas.plan(due, busy, running=running, waiting=waiting,
                                 concurrency=self._concurrency,
                                 batch_size=self._rows_for(budget), more_due=more_due,
                                 spare=self._flights.spares())

    async def _claim(self, plan: Plan, budget: int, started: float) -> list[ClaimRow]:
        """The claim statement's rows for ``plan``; ``started``: on the monotonic clock."""
        floors = self._floors.for_claim(plan.endpoint_ids, started)
        rows = [ClaimRow._make(raw) for raw in await self._db.fetch("claim", {
            **plan.params(), **self._ring.for_claim(plan.endpoint_ids),
            "floors": floors, "lease_seconds": self._leases.seconds(),
            "horizon": rate.RATE_HORIZON, "pace": rate.PACE, "budget": budget})]
        self._rate_turns.claimed(started, time.monotonic())
        self._floors.claimed(plan.endpoint_ids, floors, rows)
        self._ring.claimed(rows)
        return rows

    def _measure(self, claimed: _Claimed) -> None:
        """Whether the claim was lean (CLAIM_GAP), and its bytes per row (``_rows_for``)."""
        taken = sum(claimed.rows.values())
        self._lean = taken < LEAN_CLAIM
        if taken:
            self._row_bytes = claimed.size / taken

    def _rows_for(self, budget: int) -> int:
        """Rows to ask for: --batch-size, or fewer when the last claim's events were large.

        The statement reads the size of every row it locks before the byte
        budget picks those it keeps: twice the rows the budget held at the
        last claim's sizes bounds that reading without cutting a claim short.
        """
        if self._row_bytes <= 0:
            return self._batch_size
        return max(1, min(self._batch_size, math.ceil(2 * budget / self._row_bytes)))

    def _group(self, rows: Sequence[ClaimRow], started: float) -> _Claimed:
        """The claim's rows as groups (they come ordered by endpoint and group);
        ``started``: the claim's start on the monotonic clock.

        A group's payloads are kept within BATCH_BYTES, counted in bytes as the
        database measured them (not characters: UTF-8 takes up to four bytes
        for one): the rest of it follows as groups of its own, waiting for the
        slot (those beyond what its endpoint's running requests can take go back
        at once, for a later claim).
        """
        claimed = _Claimed()
        current: tuple[int, int] | None = None
        received = time.monotonic()  # send_in counts from the statement's end: no later
        for row in rows:
            delivery = row.delivery(started)
            self._leases.hold(delivery)
            endpoint_id = row.endpoint_id
            claimed.rows[endpoint_id] = claimed.rows.get(endpoint_id, 0) + 1
            endpoint = self._endpoints.by_id[endpoint_id]
            if current != (endpoint_id, row.grp):
                current = (endpoint_id, row.grp)
                claimed.groups.append(Group(
                    endpoint, [], Slot(endpoint_id, row.slot, row.slot_token)
                    if row.slot is not None and row.slot_token is not None else None,
                    tenant=row.tenant))
                if row.turn_at is not None and row.slot is not None:
                    claimed.groups[-1].turn = received + float(row.send_in)
                    claimed.groups[-1].last_moment = self._rate_turns.last_moment(
                        started, row.db_now, row.turn_at)
                turn = rate.next_look(endpoint, float(row.send_in))
                if (turn is not None and row.slot is not None
                        and (claimed.throttled is None or turn < claimed.throttled)):
                    claimed.throttled = turn
            elif claimed.groups[-1].size + row.size > BATCH_BYTES:
                claimed.groups.append(Group(endpoint, [], tenant=row.tenant))
            group = claimed.groups[-1]
            group.size += row.size
            group.deliveries.append(delivery)
            claimed.size += row.size
        return claimed

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        outage = 0.0
        last = -CLAIM_GAP
        while not self._stopping.is_set():
            self._beat()
            gap = last + CLAIM_GAP - loop.time()
            if gap > 0 and self._lean and not self._unwalked:  # a walk owed goes at once
                await asyncio.sleep(gap)
            last = loop.time()
            self._wake.clear()
            try:
                more = await self.claim_once()
                self.claims += 1
                outage = 0.0
            except DatabaseDown:
                # Capped, growing pauses while the database is away; wake-ups
                # (finished requests) must not turn into a reconnect storm.
                outage = min(5.0, max(0.1, outage * 2))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), outage)
                continue
            if self._pass_over is not None and self._pass_over(more, self._throttled is not None):
                return
            if more and self._flights.requests() < self._concurrency:
                continue
            wait = self._poll_interval
            if self._flights.spares():  # back to the fleet once they have lingered
                wait = min(wait, SPARE_LINGER)
            if self._throttled is not None:
                wait = min(wait, max(self._throttled, 0.001))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
