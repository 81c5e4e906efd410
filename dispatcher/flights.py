"""Requests in flight, and claimed requests waiting in memory, per endpoint.

A claim hands out groups of deliveries (one request each). A group the claim
granted a request slot to starts at once (after the wait its rate limit
asks for); the others wait here (prefetch, see ``limits.quota``), holding no
slot: the fleet's ``--max-in-flight`` counts only requests that run. When a
request ends, its slot goes straight to the next waiting group of its
endpoint, without a round trip, if the endpoint answered, or, if none waits,
to the next claim (which the request's end wakes: it brings a group for the
slot, or gives the slot back to the fleet); otherwise the slot is given back,
and after a retryable failure (with a circuit breaker on) the waiting groups
are handed back too, so that nothing more is sent until a claim has looked at
the circuit again.

On a graceful stop, :meth:`Flights.drain` sorts what is held: requests not
sent yet are handed back, requests running get the grace period, and those
still running when it ends are cancelled (they may have reached the endpoint).
Every request that ends, however, gives its slot back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from dispatcher.limits import circuit, rate, ring
from dispatcher.limits.slots import SlotBook
from dispatcher.policy.model import Delivery, Endpoint, Slot
from outbox._shared.text import counted

log = logging.getLogger("dispatcher")
_MIXED = object()
"""An endpoint's waiting groups may be of more than one tenant (until none waits)."""

Send = Callable[[Endpoint, list[Delivery]], Awaitable[bool]]
"""Makes one request for a group and hands its results on; True when the endpoint answered."""


@dataclass(slots=True)
class Group:
    """The deliveries of one request, and the slot it runs in (None while it waits)."""

    endpoint: Endpoint
    deliveries: list[Delivery]
    slot: Slot | None = None
    turn: float | None = None  # its rate-limit turn, on the monotonic clock (None: at once)
    last_moment: float | None = None  # after this, its turn is missed (limits.rate.Turns)
    sending: bool = False  # past its rate-limit wait: it may have reached the endpoint
    size: int = 0  # its payloads' bytes (``limits.quota.HELD_BYTES`` counts them)
    # Its events' tenant (a claim puts one tenant's events in a request); a field, not
    # read from the first delivery each time: ``limits.ring.place`` reads every waiting
    # group's on each group queued behind others.
    tenant: str | None = None


@dataclass(slots=True)
class Drained:
    """What a graceful stop found: never sent (hand back), and cut off by the grace."""

    unsent: list[Delivery] = field(default_factory=list)
    cut_off: list[Delivery] = field(default_factory=list)


class Flights:
    """Per endpoint: requests running and groups waiting; ``send`` makes each request.

    ``free_slot`` gives a slot back to the fleet, ``hand_back`` returns groups
    never sent, ``on_done`` is called after every request; ``slots``: the slots held,
    whose spare ones this keeps and takes.
    """

    def __init__(self, send: Send, *, free_slot: Callable[[Slot], None],
                 hand_back: Callable[[list[Delivery]], None],
                 on_done: Callable[[], None], slots: SlotBook | None = None) -> None:
        self._send = send
        self._free_slot = free_slot
        self._hand_back = hand_back
        self._on_done = on_done
        self._accepting = True
        self._running: dict[int, int] = {}  # requests started, per endpoint
        self._waiting: dict[int, deque[Group]] = {}
        # Per endpoint: the one tenant of all its waiting groups, or _MIXED (see queue).
        self._sole: dict[int, object] = {}
        self._tasks: dict[asyncio.Task[None], Group] = {}
        # Slots of requests that ended with no group waiting, kept for the groups
        # the next claim (or the one on its way) brings; and each slot's passes.
        self._spares = (slots if slots is not None else SlotBook()).spares

    def counts(self) -> tuple[dict[int, int], dict[int, int]]:
        """Per endpoint with any: slots held (requests running, and slots kept for the
        claim on its way), and groups waiting for a slot."""
        running = {ep: n for ep, n in self._running.items() if n}
        for ep, spare in self._spares.counts().items():
            running[ep] = running.get(ep, 0) + spare
        waiting = {ep: len(queue) for ep, queue in self._waiting.items() if queue}
        return running, waiting

    def spares(self) -> dict[int, int]:
        """Per endpoint with any: slots held with no request in them, for the next claim."""
        return self._spares.counts()

    def held_bytes(self) -> int:
        """Payload bytes of the groups running and waiting: what claims keep in memory."""
        return (sum(group.size for group in self._tasks.values())
                + sum(group.size for queue in self._waiting.values() for group in queue))

    def requests(self) -> int:
        """Requests started, over all endpoints."""
        return len(self._tasks)

    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        return not self._tasks and not any(self._waiting.values())

    def start(self, group: Group) -> None:
        """Start the group's request in its slot; it sends at ``group.turn``."""
        endpoint_id = group.endpoint.id
        self._running[endpoint_id] = self._running.get(endpoint_id, 0) + 1
        task = asyncio.create_task(self._run(group))
        self._tasks[task] = group
        task.add_done_callback(self._done)

    def queue(self, group: Group) -> None:
        """Keep the group until a request of its endpoint ends and hands it its slot: in
        its tenant's turn among the groups waiting (``limits.ring.place``)."""
        endpoint_id = group.endpoint.id
        waiting = self._waiting.setdefault(endpoint_id, deque())
        tenant = group.tenant
        if not waiting or self._sole.get(endpoint_id, _MIXED) == tenant:
            # Every group waiting is of this tenant (or none waits): its place is the end,
            # without the walk over the queue that ``ring.place`` makes, once per group.
            waiting.append(group)
            self._sole[endpoint_id] = tenant
            return
        waiting.insert(ring.place(waiting, tenant), group)
        self._sole[endpoint_id] = _MIXED

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        """A claim is on its way; when it ends, :meth:`claim_ended` deals the spare slots.

        The claim asked for prefetched groups to follow the requests running
        when it was sized, and for one group per spare slot; on a fast
        endpoint those requests may all end before it returns. Their slots
        are kept (see ``_pass_on``) instead of going back to the fleet and
        leaving the new groups nothing to start in.
        """
        try:
            yield
        finally:
            self.claim_ended()

    def give_back_spares(self) -> int:
        """Slots kept for the next claim back to the fleet (an endpoint with due work has
        none here: the places they take go round in turn); how many."""
        given = self._spares.release(time.monotonic(), everything=True)
        for slot in given:
            self._free_slot(slot)
        return len(given)

    def claim_ended(self) -> None:
        """Spare slots to waiting groups, those kept SPARE_LINGER back to the fleet; no
        group left stranded.

        A waiting group starts only when a running request of its endpoint
        ends and passes its slot on, so there must never be more of them
        than requests running: the surplus goes back, uncharged, for any
        dispatcher's next claim.
        """
        if self._accepting:
            for endpoint_id in self._spares.endpoints():
                waiting = self._waiting.get(endpoint_id)
                while waiting and (slot := self._spares.take(endpoint_id)) is not None:
                    following = waiting.popleft()
                    following.slot = slot
                    self.start(following)
        for slot in self._spares.release(time.monotonic(), everything=not self._accepting):
            self._free_slot(slot)
        for endpoint_id, waiting in self._waiting.items():
            surplus = len(waiting) - self._running.get(endpoint_id, 0)
            if surplus > 0:
                handed = [waiting.pop() for _ in range(surplus)]
                self._hand_back([d for group in reversed(handed) for d in group.deliveries])

    async def _run(self, group: Group) -> None:
        """The group's request, then each waiting group its slot passes to, in this one
        task: a task per run of requests in a slot, not one per request."""
        following: Group | None = group
        while following is not None:
            group = following
            if group.turn is not None:
                wait = group.turn - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if group.last_moment is not None and time.monotonic() > group.last_moment:
                # Sent now, it would bunch with the turns after it: a later claim gives it
                # a new turn (its slot goes back to the fleet in _done).
                log.debug("a request missed its rate-limit turn by %.3fs; handed back",
                          time.monotonic() - group.last_moment + rate.LATE)
                self._hand_back(group.deliveries)
                return
            group.sending = True
            answered = await self._send(group.endpoint, group.deliveries)
            if not self._accepting:
                return
            following = self._pass_on(group, answered)
            if following is not None:  # it goes on in this task, in the slot passed on
                task = asyncio.current_task()
                assert task is not None
                self._running[following.endpoint.id] = (
                    self._running.get(following.endpoint.id, 0) + 1)
                self._tasks[task] = following
                self._ended(group)

    def _pass_on(self, group: Group, answered: bool) -> Group | None:
        """After a request: its slot to the next waiting group (returned: the caller runs
        it), or back to the fleet."""
        endpoint = group.endpoint
        waiting = self._waiting.get(endpoint.id)
        healthy = circuit.passes_on(endpoint, answered)
        if healthy and group.slot is not None and self._spares.another_pass(group.slot):
            if not waiting and not rate.keeps_spare_slots(endpoint):
                return None  # its turns come with new requests: the slot goes back (_done)
            if waiting:
                following = waiting.popleft()
                following.slot, group.slot = group.slot, None
                return following
            # Kept for the next claim, which this request's end wakes: it counts the
            # slot as held and brings a group for it, or gives it back when it ends.
            # A slot handed back and leased again costs two writes of its row per
            # request; while a snapshot elsewhere holds the MVCC horizon back, every
            # version stays, and each claim's look for free slots walks them all.
            self._spares.keep(group.slot, time.monotonic())
            group.slot = None
            return None
        if waiting and not healthy:
            handed = [d for g in waiting for d in g.deliveries]
            waiting.clear()
            self._hand_back(handed)
        return None

    def _done(self, task: asyncio.Task[None]) -> None:
        group = self._tasks.pop(task, None)
        if group is not None:
            self._ended(group)
        if not task.cancelled() and task.exception() is not None:
            log.error("delivery task failed", exc_info=task.exception())

    def _ended(self, group: Group) -> None:
        """A group's request is over: its slot, if not passed on, back to the fleet."""
        self._running[group.endpoint.id] -= 1
        if group.slot is not None:  # not passed on: back to the fleet
            self._spares.ended(group.slot)
            self._free_slot(group.slot)
            group.slot = None
        self._on_done()

    async def drain(self, grace: float) -> Drained:
        """Stop starting requests; give those sending ``grace`` seconds; sort the rest."""
        self._accepting = False
        self.claim_ended()  # spare slots back to the fleet
        drained = Drained()
        unsent = [task for task, group in self._tasks.items() if not group.sending]
        for task in unsent:
            drained.unsent += self._tasks[task].deliveries
        drained.unsent += [d for queue in self._waiting.values()
                           for group in queue for d in group.deliveries]
        self._waiting.clear()
        for task in unsent:
            task.cancel()
        sending = [task for task, group in self._tasks.items() if group.sending]
        if sending:
            log.info("waiting up to %.0fs for %s in flight", grace,
                     counted(len(sending), "request"))
            _, late = await asyncio.wait(sending, timeout=grace)
            for task in late:
                drained.cut_off += self._tasks[task].deliveries
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await asyncio.gather(*unsent, return_exceptions=True)
        return drained
