"""The claimer on its own: a real database and real Flights, requests that answer as told."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

import outbox
from dispatcher.claimer import Claimer
from dispatcher.completer import Completer
from dispatcher.control import Control, Heartbeat
from dispatcher.db import Database, Health
from dispatcher.endpoint_view import EndpointView
from dispatcher.flights import Flights
from dispatcher.leases import Leases
from dispatcher.limits.slots import SlotBook
from dispatcher.policy.model import Delivery, Endpoint
from outbox.sql import QueryName
from tests.support.dispatcher import add_endpoint


class _Recording(Database):
    """The real connection, remembering the name of every statement it ran."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ran: list[str] = []

    async def fetch(self, name: QueryName, params: dict[str, Any] | None = None,
                    ) -> Sequence[tuple[Any, ...]]:
        self.ran.append(name)
        return await super().fetch(name, params)


class _Parts:
    """A claimer wired as app.build wires it, but whose requests only record and wait."""

    def __init__(self, dsn: str, *, concurrency: int = 8) -> None:
        self.sent: list[tuple[str, int]] = []  # (endpoint, delivery id), in start order
        self.release = asyncio.Event()
        health = Health()
        self.control = Control(Heartbeat())
        self.endpoints = EndpointView({})
        self.slots = SlotBook()
        self.leases = Leases(30, self.endpoints.longest_timeout, self.slots.held)
        self.db = _Recording(dsn, health, "claim")
        self.completer_db = Database(dsn, health, "complete")
        self.completer = Completer(self.completer_db, self.leases, self.control.wake.set,
                                   self.control.give_up, slots=self.slots)
        self.flights = Flights(self.send, free_slot=self.completer.free,
                               hand_back=self.completer.hand_back, on_done=lambda: None,
                               slots=self.slots)
        self.claimer = Claimer(db=self.db, endpoints=self.endpoints, flights=self.flights,
                               leases=self.leases, slots=self.slots,
                               wake=self.control.wake, stopping=self.control.stopping,
                               beat=self.control.heartbeat.beat, concurrency=concurrency,
                               batch_size=100, poll_interval=0.2)

    async def send(self, endpoint: Endpoint, deliveries: list[Delivery]) -> bool:
        self.sent += [(endpoint.name, d.id) for d in deliveries]
        await self.release.wait()
        return True

    async def load(self) -> None:
        [(digest, _)] = await self.db.fetch("endpoints_fingerprint")
        versions = dict(await self.db.fetch("endpoint_versions"))
        rows = await self.db.fetch("load_endpoints", {"ids": list(versions)})
        self.endpoints.update(digest, versions, rows)

    async def close(self) -> None:
        self.release.set()
        await asyncio.sleep(0.05)
        for db in (self.db, self.completer_db):
            await db.close()


def run(dsn: str, scenario: Callable[[_Parts], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        parts = _Parts(dsn, **options)
        await parts.load()
        try:
            return await scenario(parts)
        finally:
            await parts.close()
    return asyncio.run(main())


def in_flight(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM outbox.deliveries WHERE state = 'in_flight' "
                       "AND lease_token IS NOT NULL").fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def test_a_claim_leases_what_is_due_and_starts_its_requests(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """One claim: every due delivery of every endpoint with work leased and its request started."""
    for name in ("a", "b", "c"):
        add_endpoint(conn, name, f"http://127.0.0.1/{name}", events=(f"t.{name}",))
        outbox.publish(conn, f"t.{name}", {})
    conn.commit()

    async def scenario(parts: _Parts) -> list[tuple[str, int]]:
        await parts.claimer.claim_once()
        await asyncio.sleep(0.05)
        return list(parts.sent)

    sent = run(dsn, scenario)
    assert sorted(name for name, _ in sent) == ["a", "b", "c"]
    assert in_flight(conn) == 3


def test_when_slots_run_short_the_next_claim_serves_the_endpoints_after_the_last_served(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Two request slots, four endpoints with work: a, b first; once they end, c and d."""
    for name in ("a", "b", "c", "d"):
        add_endpoint(conn, name, f"http://127.0.0.1/{name}", events=(f"t.{name}",))
        outbox.publish_many(conn, [outbox.Event(f"t.{name}", {"n": n}) for n in range(3)])
    conn.commit()

    async def scenario(parts: _Parts) -> tuple[list[str], list[str]]:
        await parts.claimer.claim_once()
        await asyncio.sleep(0.05)
        first = sorted({name for name, _ in parts.sent})
        parts.release.set()  # a's and b's requests end, with the groups they brought
        await asyncio.sleep(0.1)
        parts.release.clear()
        parts.sent.clear()
        await parts.claimer.claim_once()
        await asyncio.sleep(0.05)
        return first, sorted({name for name, _ in parts.sent})

    first, second = run(dsn, scenario, concurrency=2)
    assert first == ["a", "b"]
    assert second == ["c", "d"]


def test_a_claim_with_nothing_due_sends_no_claim_statement(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Endpoints without due work cost the claim nothing: the walk finds none, no claim runs."""
    add_endpoint(conn, "idle", "http://127.0.0.1/idle")
    conn.commit()

    async def scenario(parts: _Parts) -> tuple[bool, list[str]]:
        parts.db.ran.clear()
        return await parts.claimer.claim_once(), parts.db.ran

    more, ran = run(dsn, scenario)
    assert more is False
    assert ran == ["due_endpoints"]


def test_with_every_slot_busy_and_more_endpoints_waiting_a_wake_up_sends_nothing(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Two request slots busy, four endpoints with work: a request's end that hands its slot
    to a successor wakes the claimer, and that claim can grant nothing: no walk, no claim."""
    for name in ("a", "b", "c", "d"):
        add_endpoint(conn, name, f"http://127.0.0.1/{name}", events=(f"t.{name}",))
        outbox.publish_many(conn, [outbox.Event(f"t.{name}", {"n": n}) for n in range(3)])
    conn.commit()

    async def scenario(parts: _Parts) -> tuple[list[str], list[str], bool]:
        parts.db.ran.clear()
        await parts.claimer.claim_once()
        await asyncio.sleep(0.05)
        first = list(parts.db.ran)
        parts.db.ran.clear()
        more = await parts.claimer.claim_once()
        return first, list(parts.db.ran), more

    first, busy, more = run(dsn, scenario, concurrency=2)
    # A claim slower than keys.PARK_AFTER (a loaded machine) is followed by parking.
    assert [name for name in first if name != "park_blocked"] == ["due_endpoints", "claim"]
    assert busy == []
    assert more is False
