"""The demo's receiving service: fails on purpose, never past its clean attempt, and checks."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime

import pytest

from dispatcher.policy.model import Endpoint, EventData
from dispatcher.policy.signing import encode
from outbox.demo import receiver as _demo_receiver
from outbox.demo.receiver import CLEAN_ATTEMPT, FlakyEndpoint, make_verifier
from outbox.endpoints import decode_secret, generate_secret
from outbox.testing import Request


def _request(secret: str, *, key: str | None = None, n: int | None = None,
             event_id: uuid.UUID | None = None) -> Request:
    """A request signed exactly as the dispatcher signs it."""
    endpoint = Endpoint(id=1, name="demo", url="http://127.0.0.1/",
                        keys=(decode_secret(secret, {}),))
    payload = json.dumps({"order_id": 1} | ({"n": n} if n is not None else {}))
    event = EventData(id=event_id or uuid.uuid4(), type="order.created", key=key,
                      payload=payload, headers={}, created_at=datetime.now(UTC))
    headers, body = encode(endpoint, [event], datetime.now(UTC))
    return Request("POST", "/", {k.lower(): v for k, v in headers}, body, time.time())


class _Dice:
    """A random source that always rolls the same number."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def _status(endpoint: FlakyEndpoint, request: Request) -> int:
    return asyncio.run(endpoint.respond(request)).status


@pytest.mark.parametrize("verifier", ["standardwebhooks", "dispatcher.policy.signing"])
def test_signatures_are_verified(verifier: str) -> None:
    """Both verifiers accept the dispatcher's signature and refuse another secret's."""
    secret = generate_secret()
    name, verify = make_verifier(secret)
    if verifier != name:
        verify = _demo_receiver._own_verifier(secret)
    assert verify(_request(secret)) is not None
    assert verify(_request(generate_secret())) is None


def test_a_bad_signature_is_refused_and_counted() -> None:
    """A request signed with another secret gets 401 and counts as a bad signature."""
    endpoint = FlakyEndpoint(generate_secret())
    assert _status(endpoint, _request(generate_secret())) == 401
    assert (endpoint.bad_signatures, endpoint.accepted) == (1, 0)


def test_failures_stop_at_the_clean_attempt() -> None:
    """Even with every roll failing, an event is accepted at its clean attempt."""
    secret = generate_secret()
    endpoint = FlakyEndpoint(secret)
    endpoint._rng = _Dice(0.0)  # type: ignore[assignment]
    event_id = uuid.uuid4()
    statuses = [_status(endpoint, _request(secret, event_id=event_id))
                for _ in range(CLEAN_ATTEMPT)]
    assert statuses == [503] * (CLEAN_ATTEMPT - 1) + [204]
    assert (endpoint.accepted, endpoint.retries, endpoint.answered_503) == (
        1, CLEAN_ATTEMPT - 1, CLEAN_ATTEMPT - 1)


def test_order_and_rollbacks_are_checked() -> None:
    """An earlier event of a key after a later one, and a rolled-back id, are both counted."""
    secret = generate_secret()
    endpoint = FlakyEndpoint(secret)
    endpoint._rng = _Dice(0.5)  # type: ignore[assignment]
    ghost = uuid.uuid4()
    endpoint.rolled_back.add(str(ghost))
    for n in (1, 3, 2):
        _status(endpoint, _request(secret, key="customer-1", n=n))
    _status(endpoint, _request(secret, event_id=ghost))
    assert endpoint.out_of_order == 1
    assert endpoint.rolled_back_arrived == 1
    assert len(endpoint.latencies) == 4
