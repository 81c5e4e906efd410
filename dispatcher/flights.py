"""Requests in flight, and claimed requests waiting for a slot, per endpoint.

A claim hands out groups of deliveries (one request each). A group either
starts at once, after the wait its rate limit asks for, or waits here in
memory (prefetch, see ``policy.quota``) until its endpoint has a free slot
under ``--max-in-flight`` and the process one under ``--concurrency``. Each
running request is one task; when it ends, the waiting groups move up.

On a graceful stop, :meth:`Flights.drain` sorts what is held: requests not
sent yet are handed back, requests running get the grace period, and those
still running when it ends are cancelled (they may have reached the endpoint).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dispatcher.policy.model import Delivery, Endpoint

log = logging.getLogger("dispatcher")

Send = Callable[[Endpoint, list[Delivery]], Awaitable[None]]
"""Makes one request for a group of deliveries and hands their results on."""


@dataclass(slots=True)
class Drained:
    """What a graceful stop found: never sent (hand back), and cut off by the grace."""

    unsent: list[Delivery] = field(default_factory=list)
    cut_off: list[Delivery] = field(default_factory=list)


class Flights:
    """Per endpoint: requests running and groups waiting; ``send`` makes each request."""

    def __init__(self, concurrency: int, send: Send, on_done: Callable[[], None]) -> None:
        self._concurrency = concurrency
        self._send = send
        self._on_done = on_done
        self._accepting = True
        self._running: dict[int, int] = {}  # requests started, per endpoint
        self._waiting: dict[int, deque[tuple[Endpoint, list[Delivery]]]] = {}
        self._tasks: dict[asyncio.Task[None], list[Delivery]] = {}
        self._sending: set[asyncio.Task[None]] = set()  # past their rate-limit wait

    def held(self, endpoint_id: int) -> int:
        """Requests of this endpoint running or waiting here."""
        return self._running.get(endpoint_id, 0) + len(self._waiting.get(endpoint_id, ()))

    def requests(self) -> int:
        """Requests running (or waiting for their rate-limit turn), over all endpoints."""
        return len(self._tasks)

    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        return not self._tasks and not any(self._waiting.values())

    def start(self, endpoint: Endpoint, group: list[Delivery], delay: float = 0.0) -> None:
        """Start the request now; it sends after ``delay`` seconds (its rate-limit turn)."""
        self._running[endpoint.id] = self._running.get(endpoint.id, 0) + 1
        task = asyncio.create_task(self._run(endpoint, group, delay))
        self._tasks[task] = group
        task.add_done_callback(functools.partial(self._done, endpoint_id=endpoint.id))

    def queue(self, endpoint: Endpoint, group: list[Delivery]) -> None:
        """Hold the request until its endpoint and the process have a free slot."""
        self._waiting.setdefault(endpoint.id, deque()).append((endpoint, group))

    def start_waiting(self) -> None:
        """Start waiting requests while their endpoints and the process have slots."""
        for waiting in self._waiting.values():
            while waiting and len(self._tasks) < self._concurrency:
                endpoint, group = waiting[0]
                if self._running.get(endpoint.id, 0) >= endpoint.max_in_flight:
                    break
                waiting.popleft()
                self.start(endpoint, group)

    async def _run(self, endpoint: Endpoint, group: list[Delivery], delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.current_task()
        assert task is not None
        self._sending.add(task)
        await self._send(endpoint, group)

    def _done(self, task: asyncio.Task[None], endpoint_id: int) -> None:
        self._tasks.pop(task, None)
        self._sending.discard(task)
        self._running[endpoint_id] -= 1
        if self._accepting:
            self.start_waiting()
        self._on_done()
        if not task.cancelled() and task.exception() is not None:
            log.error("delivery task failed", exc_info=task.exception())

    async def drain(self, grace: float) -> Drained:
        """Stop starting requests; give those sending ``grace`` seconds; sort the rest."""
        self._accepting = False
        drained = Drained()
        unsent = [task for task in self._tasks if task not in self._sending]
        drained.unsent = [d for task in unsent for d in self._tasks[task]]
        drained.unsent += [d for waiting in self._waiting.values()
                           for _, group in waiting for d in group]
        self._waiting.clear()
        for task in unsent:
            task.cancel()
        sending = [task for task in self._tasks if task in self._sending]
        if sending:
            log.info("waiting up to %.0fs for %d requests in flight", grace, len(sending))
            _, late = await asyncio.wait(sending, timeout=grace)
            for task in late:
                drained.cut_off += self._tasks[task]
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await asyncio.gather(*unsent, return_exceptions=True)
        return drained
