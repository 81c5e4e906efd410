"""The demo's receiving service: fails on purpose, never past its clean attempt, ships once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import psycopg
import pytest

from dispatcher.policy.envelope import encode
from dispatcher.policy.model import Endpoint, EventData
from outbox.demo.receiver import CLEAN_ATTEMPT, FAIL_SHARE, TIMEOUT_SHARE, FlakyEndpoint
from outbox.endpoints import decode_secret, generate_secret
from outbox.sql import queries
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


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for a test's requests (the receiver's connections live on it)."""
    with asyncio.Runner() as loop:
        yield loop


@pytest.fixture
def shop(dsn: str, runner: asyncio.Runner) -> Iterator[Callable[[str], FlakyEndpoint]]:
    """Makes FlakyEndpoints on the test's database (inbox and demo_shipments in it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(queries["demo_shipments_table"])
    made: list[FlakyEndpoint] = []

    def make(secret: str) -> FlakyEndpoint:
        made.append(FlakyEndpoint(secret, dsn))
        return made[-1]

    yield make
    for endpoint in made:
        runner.run(endpoint._connections.close())


def shipments(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(queries["demo_shipment_count"]).fetchone()
    return int(row[0]) if row else 0


def test_a_bad_signature_is_refused_and_counted(
        shop: Callable[[str], FlakyEndpoint], runner: asyncio.Runner) -> None:
    """A request signed with another secret gets 401 and counts as a bad signature."""
    endpoint = shop(generate_secret())
    assert runner.run(endpoint.respond(_request(generate_secret()))).status == 401
    assert (endpoint.bad_signatures, endpoint.accepted) == (1, 0)


def test_failures_stop_at_the_clean_attempt(
        shop: Callable[[str], FlakyEndpoint], runner: asyncio.Runner, dsn: str) -> None:
    """Even with every roll failing, an event is accepted at its clean attempt. Each 503
    does the work and rolls it back (so that it takes as long as a success): nothing of
    it ships or is recorded, and the clean attempt is the event's first time."""
    secret = generate_secret()
    endpoint = shop(secret)
    endpoint._rng = _Dice(0.0)  # type: ignore[assignment]
    event_id = uuid.uuid4()
    first = runner.run(endpoint.respond(_request(secret, event_id=event_id))).status
    assert (first, endpoint._connections._made, shipments(dsn)) == (503, 1, 0)  # done, undone
    statuses = [first] + [
        runner.run(endpoint.respond(_request(secret, event_id=event_id))).status
        for _ in range(CLEAN_ATTEMPT - 1)]
    assert statuses == [503] * (CLEAN_ATTEMPT - 1) + [204]
    assert (endpoint.accepted, endpoint.retries, endpoint.answered_503) == (
        1, CLEAN_ATTEMPT - 1, CLEAN_ATTEMPT - 1)
    assert endpoint.duplicates == 0
    assert shipments(dsn) == 1


def test_a_late_answer_comes_back_as_a_duplicate_and_ships_once(
        shop: Callable[[str], FlakyEndpoint], runner: asyncio.Runner, dsn: str) -> None:
    """Shipped, then answered too late: the retry is absorbed by first_time, one shipment."""
    secret = generate_secret()
    endpoint = shop(secret)
    endpoint._rng = _Dice(FAIL_SHARE + TIMEOUT_SHARE / 2)  # type: ignore[assignment]
    request = _request(secret)

    async def twice() -> list[int]:
        endpoint._closing = asyncio.Event()
        endpoint._closing.set()  # cut the late answer's wait short
        return [(await endpoint.respond(request)).status for _ in range(2)]

    assert runner.run(twice()) == [204, 204]
    assert endpoint.timed_out == 2
    assert (endpoint.accepted, endpoint.duplicates) == (1, 1)
    assert shipments(dsn) == 1


def test_order_and_rollbacks_are_checked(
        shop: Callable[[str], FlakyEndpoint], runner: asyncio.Runner) -> None:
    """An earlier event of a key after a later one, and a rolled-back id, are both counted."""
    secret = generate_secret()
    endpoint = shop(secret)
    endpoint._rng = _Dice(0.5)  # type: ignore[assignment]
    ghost = uuid.uuid4()
    endpoint.rolled_back.add(str(ghost))
    for n in (1, 3, 2):
        runner.run(endpoint.respond(_request(secret, key="customer-1", n=n)))
    runner.run(endpoint.respond(_request(secret, event_id=ghost)))
    assert endpoint.out_of_order == 1
    assert endpoint.rolled_back_arrived == 1
    assert len(endpoint.latencies) == 4
