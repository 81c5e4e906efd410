"""The receiving service of ``outbox demo``: flaky on purpose, and checking every promise.

It answers a share of first attempts with 503 or too slowly for the
endpoint's timeout, so that the dispatcher's retries show; from an event's
:data:`CLEAN_ATTEMPT`-th attempt on it always accepts, so that the demo ends
without dead letters however the dice fall. Every request's Standard Webhooks
signature is verified (with the ``standardwebhooks`` library when it is
installed, else with a few lines of its own: the spec's HMAC, written apart from
the dispatcher's signer so that one cannot vouch for the other), and for each event
accepted the receiver records the latency from its ``timestamp`` (the
event's ``created_at``, taken inside the publishing transaction) to arrival,
and checks that the events of one key arrive in publish order.

The responder runs on the receiver's own thread and loop; the main thread
only reads counters, which is safe under the GIL. Slow answers wait on an
event rather than a bare sleep, so that :meth:`FlakyEndpoint.settle` can cut
them short when the demo ends or is interrupted: the receiver then closes
with no request task left pending.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

from outbox.testing import Request, Response

FAIL_SHARE = 0.20
"""Share of early attempts answered 503 Service Unavailable."""
TIMEOUT_SHARE = 0.01
"""Share of early attempts answered only after the endpoint's timeout."""
SLOW_SHARE = 0.05
"""Share of accepted requests answered after :data:`SLOW_DELAY` (within the timeout)."""
ENDPOINT_TIMEOUT = 1.0
SLOW_DELAY = 0.25
CLEAN_ATTEMPT = 4
"""From this attempt of an event on, the receiver accepts it whatever the dice say."""

Verify = Callable[[Request], Any]  # the parsed body when the signature holds, else None


def make_verifier(secret: str) -> tuple[str, Verify]:
    """A signature check for ``secret``, and the name of what performs it."""
    try:
        from standardwebhooks import Webhook, WebhookVerificationError
    except ImportError:
        return "hmac", _own_verifier(secret)
    hook = Webhook(secret)

    def verify(request: Request) -> Any:
        try:
            return hook.verify(request.body, request.headers)
        except (WebhookVerificationError, ValueError):
            return None

    return "standardwebhooks", verify


def _own_verifier(secret: str) -> Verify:
    """Standard Webhooks: base64 HMAC-SHA256 of "{id}.{timestamp}.{body}", as ``v1,...``."""
    key = base64.b64decode(secret.removeprefix("whsec_"))

    def sign(msg_id: str, timestamp: str, body: bytes) -> str:
        mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
        return "v1," + base64.b64encode(mac.digest()).decode("ascii")

    def verify(request: Request) -> Any:
        msg_id = request.header("webhook-id")
        timestamp = request.header("webhook-timestamp") or ""
        signatures = (request.header("webhook-signature") or "").split()
        if not msg_id or not timestamp.isdigit():
            return None
        expected = sign(msg_id, timestamp, request.body)
        if not any(hmac.compare_digest(expected, given) for given in signatures):
            return None
        try:
            return json.loads(request.body)
        except ValueError:
            return None

    return verify


class FlakyEndpoint:
    """``Receiver(endpoint.respond)``: the demo's downstream service and its checks."""

    def __init__(self, secret: str, seed: int | None = None) -> None:
        self.verifier, self._verify = make_verifier(secret)
        self._rng = random.Random(seed)  # noqa: S311 - dice for a demo, not for secrets
        self.rolled_back: set[str] = set()
        """Ids of events whose transaction was rolled back (filled by the publisher)."""
        self.attempts: dict[str, int] = {}
        self.latencies: list[float] = []
        self._accepted_ids: set[str] = set()
        self._last_n: dict[str, int] = {}
        self.requests = 0
        self.accepted = 0
        self.duplicates = 0
        self.answered_503 = 0
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
        response, delay = self._decide(request)
        if delay:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)
        return response

    def settle(self, timeout: float = 3.0) -> None:
        """End the delayed answers and wait for the receiver's request tasks to finish.

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

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout + 1)

    def _decide(self, request: Request) -> tuple[Response, float]:
        self.requests += 1
        event = self._verify(request)
        if not isinstance(event, dict) or not isinstance(event.get("id"), str):
            self.bad_signatures += 1
            return Response(401), 0.0
        self.verified += 1
        event_id: str = event["id"]
        attempt = self.attempts.get(event_id, 0) + 1
        self.attempts[event_id] = attempt
        if event_id in self.rolled_back:
            self.rolled_back_arrived += 1
        dice = self._rng.random()
        if attempt < CLEAN_ATTEMPT and dice < FAIL_SHARE:
            self.answered_503 += 1
            return Response(503), 0.0
        if attempt < CLEAN_ATTEMPT and dice < FAIL_SHARE + TIMEOUT_SHARE:
            self.timed_out += 1
            return Response(200), ENDPOINT_TIMEOUT + 0.5
        self._accept(event, request.received_at)
        slow = dice > 1 - SLOW_SHARE
        return Response(204), SLOW_DELAY if slow else 0.0

    def _accept(self, event: dict[str, Any], arrived: float) -> None:
        if event["id"] in self._accepted_ids:
            self.duplicates += 1  # at least once: the dispatcher missed our first answer
            return
        self._accepted_ids.add(event["id"])
        self.accepted += 1
        self.last_arrival = arrived
        created = datetime.fromisoformat(str(event.get("timestamp")))
        self.latencies.append(max(0.0, arrived - created.timestamp()))
        key, data = event.get("key"), event.get("data")
        if key is not None and isinstance(data, dict) and isinstance(data.get("n"), int):
            if data["n"] < self._last_n.get(key, 0):
                self.out_of_order += 1
            self._last_n[key] = max(data["n"], self._last_n.get(key, 0))
