"""--once's end, decided in one place (app.once_over), without a database."""

from __future__ import annotations

import asyncio

from dispatcher.app import once_over
from dispatcher.completer import Completer
from dispatcher.db import Database, Health
from dispatcher.flights import Flights
from dispatcher.leases import Leases
from dispatcher.policy.model import Delivery, Endpoint


async def _never(_: Endpoint, __: list[Delivery]) -> bool:
    raise AssertionError("no request in these tests")


def _parts() -> tuple[Flights, Completer]:
    completer = Completer(Database("host=unused", Health(), "complete"),
                          Leases(30, lambda: 0.0), lambda: None, asyncio.Event())
    return Flights(_never, free_slot=completer.free, hand_back=completer.hand_back,
                   on_done=lambda: None), completer


def test_the_pass_is_over_only_when_nothing_is_left_to_unblock() -> None:
    """More due, a rate-limit turn awaited, or a result written since: not over yet."""
    flights, completer = _parts()
    over = once_over(flights, completer)
    assert over(more=True, throttled=False) is False
    assert over(more=False, throttled=True) is False
    assert over(more=False, throttled=False) is True


def test_a_result_written_since_the_last_claim_asks_for_one_more() -> None:
    """A result may free a key's next event or a slot: one more claim before the end."""
    flights, completer = _parts()
    over = once_over(flights, completer)
    completer.written += 1  # as a write of one record does
    assert over(more=False, throttled=False) is False
    assert over(more=False, throttled=False) is True
