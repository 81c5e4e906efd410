"""Request slots' Python half: a slot kept between two requests, its passes and its lingering
(the SQL half, the fleet's cap: tests/integration/test_fleet_sql.py)."""

from __future__ import annotations

import json
import uuid

from dispatcher.leases import Leases
from dispatcher.limits.slots import MAX_PASSES, SPARE_LINGER, SlotBook, Spares, slots_json
from dispatcher.policy.model import Slot


def _slot(endpoint_id: int, n: int) -> Slot:
    return Slot(endpoint_id, n, uuid.UUID(int=endpoint_id * 100 + n))


def test_a_kept_slot_goes_to_its_own_endpoint_only() -> None:
    """take() hands a spare slot to a request of the same endpoint, once."""
    spares = Spares()
    spares.keep(_slot(1, 0), now=0.0)
    assert spares.counts() == {1: 1}
    assert spares.take(2) is None
    assert spares.take(1) == _slot(1, 0)
    assert spares.take(1) is None
    assert spares.counts() == {}


def test_slots_go_back_once_they_have_lingered() -> None:
    """release() gives back what was kept SPARE_LINGER or longer; everything=True, all."""
    spares = Spares()
    spares.keep(_slot(1, 0), now=0.0)
    spares.keep(_slot(1, 1), now=SPARE_LINGER / 2)
    assert spares.release(SPARE_LINGER) == [_slot(1, 0)]
    assert spares.endpoints() == [1]
    assert spares.release(SPARE_LINGER, everything=True) == [_slot(1, 1)]
    assert spares.endpoints() == []


def test_a_slot_serves_at_most_max_passes_requests_in_a_row() -> None:
    """After MAX_PASSES requests in a row the slot goes back; its count starts again after."""
    spares = Spares()
    slot = _slot(1, 0)
    passes = [spares.another_pass(slot) for _ in range(MAX_PASSES)]
    assert passes == [True] * (MAX_PASSES - 1) + [False]
    assert spares.another_pass(slot)
    spares.ended(slot)
    assert all(spares.another_pass(slot) for _ in range(MAX_PASSES - 1))


def test_slots_as_the_statements_take_them() -> None:
    """[endpoint_id, slot, token] per slot, the token as text."""
    assert json.loads(slots_json([_slot(3, 1)])) == [[3, 1, str(uuid.UUID(int=301))]]


def test_the_slot_book_holds_a_slot_from_its_grant_until_it_is_freed() -> None:
    """A slot a claim granted is extended by the leases, spare or not, until freed."""
    book = SlotBook()
    leases = Leases(30, lambda: 0.0, book.held)
    book.hold(_slot(1, 0))
    book.hold(_slot(1, 1))
    book.spares.keep(_slot(1, 1), now=0.0)  # spare: still held, its lease still extended
    assert set(leases.held()[2]) == {_slot(1, 0), _slot(1, 1)}
    book.freed([_slot(1, 0)])
    assert leases.held()[2] == [_slot(1, 1)]
