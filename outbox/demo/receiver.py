"""The receiving service of ``outbox demo``: flaky on purpose, receiving as users should.

Every request is verified with :class:`outbox.receive.Verifier`; each event
accepted is shipped (a row in ``demo_shipments``) in a transaction that also
records it with :func:`outbox.receive.afirst_time`, so a delivery that
arrives again ships nothing twice: the summary counts those duplicates
absorbed, and the shipments, which must equal the events.

It answers a share of first attempts with 503 (its work rolled back), or
ships and then answers too slowly for the endpoint's timeout, so that the
dispatcher's retries show, and the second kind comes back as a duplicate;
from an event's :data:`CLEAN_ATTEMPT`-th attempt on it always answers in
time, so that the demo's orders all arrive however the dice fall. One event
of :data:`REFUSED_TYPE` is refused with 422 at every attempt, so that the
demo shows a dead letter too. For
each event shipped it records the latency from its publish time to arrival,
and checks that the events of one key arrive in publish order.

The responder runs on the receiver's own thread and loop, with a few database
connections of its own there (one transaction per request); the main thread
only reads counters, which is safe under the GIL. Slow answers wait on an
event rather than a bare sleep, so that :meth:`FlakyEndpoint.settle` can cut
them short when the demo ends or is interrupted: the receiver then closes
with no request task left pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import psycopg

from outbox import receive
from outbox._shared.dsn import server_options
from outbox.sql import queries
from outbox.testing import Request, Response

FAIL_SHARE = 0.20
"""Share of early attempts answered 503 Service Unavailable."""
TIMEOUT_SHARE = 0.02
"""Share of early attempts shipped, then answered only after the endpoint's timeout."""
SLOW_SHARE = 0.05
"""Share of accepted requests answered after :data:`SLOW_DELAY` (within the timeout)."""
ENDPOINT_TIMEOUT = 1.0
SLOW_DELAY = 0.25
CLEAN_ATTEMPT = 4
"""From this attempt of an event on, the receiver answers in time whatever the dice say."""
CONSUMER = "demo-shipping"
REFUSED_TYPE = "order.refund_requested"
"""The type the receiver never takes (422: not retried, a dead letter at once)."""
CONNECTIONS = 8


class _Connections:
    """A few connections to the receiver's database, each lent to one request at a time."""

    def __init__(self, dsn: str, size: int = CONNECTIONS) -> None:
        self._dsn = dsn
        self._size = size
        self._made = 0
        self._idle: asyncio.Queue[psycopg.AsyncConnection[Any]] | None = None

    async def ship(self, events: list[receive.Received], *, commit: bool = True) -> list[bool]:
        """Ship each event not shipped before, in one transaction; which were first times.

        ``commit=False``: the same work, rolled back (nothing shipped, nothing recorded).
        """
        if self._idle is None:
            self._idle = asyncio.Queue()
        if self._idle.empty() and self._made < self._size:
            self._made += 1
            conn = await psycopg.AsyncConnection.connect(
                self._dsn, application_name="outbox-demo receiver",
                options=server_options(self._dsn))
        else:
            conn = await self._idle.get()
        try:
            fresh = []
            async with conn.transaction():
                for event in events:
                    first = await receive.afirst_time(conn, event.id, consumer=CONSUMER)
                    if first:
                        await conn.execute(queries["demo_shipment_insert"], {
                            "order_id": event.data.get("order_id"), "event_id": event.id})
                    fresh.append(first)
                if not commit:
                    raise psycopg.Rollback
            return fresh
        finally:
            self._idle.put_nowait(conn)

    async def close(self) -> None:
        while self._idle is not None and not self._idle.empty():
            await self._idle.get_nowait().close()


class FlakyEndpoint:
    """``Receiver(endpoint.respond)``: the demo's downstream service and its checks."""

    verifier = "outbox.receive"
    """What verifies the signatures (named in the summary)."""

    def __init__(self, secret: str, dsn: str, seed: int | None = None) -> None:
        self._verifier = receive.Verifier(secret)
        self._connections = _Connections(dsn)
        self._rng = random.Random(seed)  # noqa: S311 - dice for a demo, not for secrets
        self.rolled_back: set[str] = set()
        """Ids of events whose transaction was rolled back (filled by the publisher)."""
        self.attempts: dict[str, int] = {}
        self.latencies: list[float] = []
        self.first_try_latencies: list[float] = []
        """Publish (the event's timestamp) to arrival of the events that arrived at their
        first attempt: the lag without the retries this demo provokes on purpose."""
        self._last_n: dict[str, int] = {}
        self.requests = 0
        self.accepted = 0
        self.duplicates = 0
        """Deliveries that arrived again after their event was shipped: absorbed."""
        self.answered_503 = 0
        self.refused = 0
        """Requests answered 422 (the :data:`REFUSED_TYPE` event)."""
        self.timed_out = 0
        self.verified = 0
        self.bad_signatures = 0
        self.out_of_order = 0
        self.rolled_back_arrived = 0
        self.last_arrival = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None

    @property
    def retries(self) -> int:
        """Requests beyond the first one of each event."""
        return self.requests - len(self.attempts)

    async def respond(self, request: Request) -> Response:
        """The receiver's responder: decide, then wait out the delay (cut short by settle)."""
        if self._closing is None:
            self._loop, self._closing = asyncio.get_running_loop(), asyncio.Event()
        response, delay = await self._decide(request)
        if delay:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)
        return response

    def settle(self, timeout: float = 3.0) -> None:
        """End the delayed answers, wait for the request tasks, close the connections.

        Call it after the dispatcher is gone and before ``Receiver.close()``,
        which would otherwise stop its loop with those tasks still pending.
        """
        loop, closing = self._loop, self._closing
        if loop is None or closing is None or loop.is_closed():
            return

        async def finish() -> None:
            closing.set()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if others:
                await asyncio.wait(others, timeout=timeout)
            await self._connections.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout + 1)

    async def _decide(self, request: Request) -> tuple[Response, float]:
        self.requests += 1
        try:
            events = self._verifier.verify(request.headers, request.body)
        except receive.InvalidSignature:
            self.bad_signatures += 1
            return Response(401), 0.0
        except receive.InvalidDelivery:
            self.bad_signatures += 1
            return Response(400), 0.0
        self.verified += 1
        for event in events:
            self.attempts[event.id] = attempt = self.attempts.get(event.id, 0) + 1
            if event.id in self.rolled_back:
                self.rolled_back_arrived += 1
        if any(event.type == REFUSED_TYPE for event in events):
            self.refused += 1
            return Response(422), 0.0
        dice = self._rng.random()
        if attempt < CLEAN_ATTEMPT and dice < FAIL_SHARE:
            # The work done and rolled back, as by a service whose commit failed: a 503
            # takes as long as a success. Answered at once, on a busy machine a burst's
            # 503s all ended before its successes, and the breaker, which weighs the
            # attempts that ended, saw a majority of failures and opened, again after
            # each probe (a run of 5 minutes, where 15 s is usual).
            await self._connections.ship(events, commit=False)
            self.answered_503 += 1
            return Response(503), 0.0
        for event, first in zip(events, await self._connections.ship(events), strict=True):
            if first:
                self._accept(event, request.received_at, self.attempts[event.id])
            else:
                self.duplicates += 1  # at least once: the dispatcher missed our answer
        if attempt < CLEAN_ATTEMPT and dice < FAIL_SHARE + TIMEOUT_SHARE:
            self.timed_out += 1  # shipped, but the answer comes too late: it will be back
            return Response(204), ENDPOINT_TIMEOUT + 0.5
        slow = dice > 1 - SLOW_SHARE
        return Response(204), SLOW_DELAY if slow else 0.0

    def _accept(self, event: receive.Received, arrived: float, attempt: int) -> None:
        self.accepted += 1
        self.last_arrival = arrived
        lag = max(0.0, arrived - event.time.timestamp())
        self.latencies.append(lag)
        if attempt == 1:
            self.first_try_latencies.append(lag)
        key, data = event.key, event.data
        if key is not None and isinstance(data, dict) and isinstance(data.get("n"), int):
            if data["n"] < self._last_n.get(key, 0):
                self.out_of_order += 1
            self._last_n[key] = max(data["n"], self._last_n.get(key, 0))
