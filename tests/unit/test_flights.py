"""Requests and waiting groups: slots passed on, handed back, never stranded (no database)."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest

import dispatcher.flights
import dispatcher.limits.slots
from dispatcher.flights import Flights, Group
from dispatcher.limits.slots import MAX_PASSES
from dispatcher.policy.model import Delivery, Endpoint, EventData, Slot

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _group(endpoint: Endpoint, n: int, slot: int | None) -> Group:
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload="{}", headers={},
                      created_at=NOW)
    delivery = Delivery(id=n, endpoint_id=endpoint.id, event=event, attempts=1,
                        lease_token=uuid.uuid4())
    return Group(endpoint, [delivery],
                 Slot(endpoint.id, slot, uuid.uuid4()) if slot is not None else None)


class _World:
    """A Flights whose requests answer as told, recording slots freed and groups handed back."""

    def __init__(self, answered: bool = True) -> None:
        self.answered = answered
        self.sent: list[int] = []
        self.freed: list[int] = []
        self.handed: list[int] = []
        self.release = asyncio.Event()
        self.flights = Flights(self.send, free_slot=lambda s: self.freed.append(s.slot),
                               hand_back=lambda ds: self.handed.extend(d.id for d in ds),
                               on_done=lambda: None)

    async def send(self, _: Endpoint, deliveries: list[Delivery]) -> bool:
        self.sent += [d.id for d in deliveries]
        await self.release.wait()
        return self.answered

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)


def test_an_answered_request_passes_its_slot_to_the_next_waiting_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiting group starts in the slot of the request that ended; nothing goes back."""
    monkeypatch.setattr(dispatcher.limits.slots, "SPARE_LINGER", 0.0)
    async def scenario() -> _World:
        world = _World()
        endpoint = Endpoint(id=1, name="e", url="http://x/")
        world.flights.start(_group(endpoint, 1, slot=0))
        world.flights.queue(_group(endpoint, 2, slot=None))
        await world.settle()
        world.release.set()
        await world.settle()
        return world

    world = asyncio.run(scenario())
    assert world.sent == [1, 2]
    assert world.freed == []  # kept for the next claim, which the request's end woke
    assert world.flights.counts() == ({1: 1}, {})
    world.flights.claim_ended()  # that claim brought nothing for it
    assert world.freed == [0]
    assert world.handed == []


def test_a_failed_request_with_a_breaker_hands_back_the_waiting_groups() -> None:
    """After a retryable failure nothing more is sent without a claim: the waiting go back."""
    async def scenario() -> _World:
        world = _World(answered=False)
        endpoint = Endpoint(id=1, name="e", url="http://x/", breaker_failures=5)
        world.flights.start(_group(endpoint, 1, slot=3))
        world.flights.queue(_group(endpoint, 2, slot=None))
        await world.settle()
        world.release.set()
        await world.settle()
        return world

    world = asyncio.run(scenario())
    assert world.sent == [1]
    assert world.handed == [2]
    assert world.freed == [3]


def test_waiting_groups_beyond_the_running_requests_are_handed_back() -> None:
    """A claim that returns after its endpoint's requests ended strands nothing."""
    async def scenario() -> _World:
        world = _World()
        endpoint = Endpoint(id=1, name="e", url="http://x/")
        world.flights.start(_group(endpoint, 1, slot=0))
        for n in (2, 3, 4):
            world.flights.queue(_group(endpoint, n, slot=None))
        world.flights.claim_ended()
        await world.settle()
        return world

    world = asyncio.run(scenario())
    assert world.handed == [3, 4]
    assert world.flights.counts()[1].get(1) == 1


def test_drain_sorts_unsent_and_cut_off_and_frees_every_slot() -> None:
    """A stop: waiting and not-yet-sending groups are unsent, a hung request is cut off."""
    async def scenario() -> tuple[_World, list[int], list[int]]:
        world = _World()
        endpoint = Endpoint(id=1, name="e", url="http://x/")
        world.flights.start(_group(endpoint, 1, slot=0))  # sends, then hangs
        late = _group(endpoint, 2, slot=1)
        late.turn = time.monotonic() + 60.0  # waits for its rate-limit turn
        world.flights.start(late)
        world.flights.queue(_group(endpoint, 3, slot=None))
        await world.settle()
        drained = await world.flights.drain(grace=0.05)
        await world.settle()
        return world, [d.id for d in drained.unsent], [d.id for d in drained.cut_off]

    world, unsent, cut_off = asyncio.run(scenario())
    assert sorted(unsent) == [2, 3]
    assert cut_off == [1]
    assert sorted(world.freed) == [0, 1]


def test_slots_of_requests_ending_with_none_waiting_wait_for_the_next_claims_groups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that ends with no group waiting keeps its slot for the next claim's group:
    a slot given back and leased again costs two writes of its row per request."""
    monkeypatch.setattr(dispatcher.limits.slots, "SPARE_LINGER", 0.0)
    async def scenario() -> _World:
        world = _World()
        world.release.set()  # requests end at once
        endpoint = Endpoint(id=1, name="e", url="http://x/")
        world.flights.start(_group(endpoint, 1, slot=5))
        await world.settle()  # it ended; its slot is kept
        world.flights.queue(_group(endpoint, 2, slot=None))  # what the claim brought
        world.flights.claim_ended()
        await world.settle()
        world.flights.claim_ended()  # the claim after brought nothing
        return world

    world = asyncio.run(scenario())
    assert world.sent == [1, 2]
    assert world.handed == []
    assert world.freed == [5]  # once, after the second request, by the claim after it


def test_a_slot_goes_back_to_the_fleet_after_serving_its_passes_in_a_row() -> None:
    """A dispatcher with its own backlog cannot keep a slot for ever: after MAX_PASSES
    requests in a row it is freed for any dispatcher's next claim."""
    async def scenario() -> _World:
        world = _World()
        world.release.set()
        endpoint = Endpoint(id=1, name="e", url="http://x/")
        world.flights.start(_group(endpoint, 0, slot=0))
        for n in range(1, MAX_PASSES + 5):
            world.flights.queue(_group(endpoint, n, slot=None))
        await world.settle()
        for _ in range(MAX_PASSES * 3):
            await asyncio.sleep(0)
        return world

    world = asyncio.run(scenario())
    assert world.sent == list(range(MAX_PASSES))  # the slot's own request and its passes
    assert world.freed == [0]


def test_a_spare_slot_lingers_over_claims_that_bring_nothing_then_goes_back() -> None:
    """A trickle of events reuses the slot; a dispatcher gone idle gives it back after
    SPARE_LINGER seconds, at its next claim."""
    async def scenario() -> tuple[list[int], list[int]]:
        world = _World()
        world.release.set()
        endpoint = Endpoint(id=1, name="e", url="http://x/")
        world.flights.start(_group(endpoint, 1, slot=7))
        await world.settle()
        world.flights.claim_ended()  # a claim that brought nothing, at once
        early = list(world.freed)
        await asyncio.sleep(dispatcher.limits.slots.SPARE_LINGER + 0.01)
        world.flights.claim_ended()
        return early, world.freed

    early, late = asyncio.run(scenario())
    assert early == []
    assert late == [7]
