"""Request slots (``--max-in-flight N``): the fleet's cap on an endpoint's requests at once.

A slot is a row of ``endpoint_slots``, leased by the claim that grants it
(``claim`` in dispatch.sql: FOR UPDATE SKIP LOCKED over the free ones, an
expired lease counting as free), kept leased by maintenance
(``extend_leases``) and freed by the complete statement (``freed``). So the
cap holds for the fleet, however many dispatchers share the endpoint.

This module is the Python half: the slots one dispatcher holds
(:class:`SlotBook`: granted by a claim, extended by maintenance, forgotten
once the complete statement freed them), what it does with a slot between
two requests (:class:`Spares`), and the slots as the statements take them
(:func:`slots_json`). A slot whose request ended goes straight to the next
waiting request of its endpoint, at most MAX_PASSES times in a row; with none
waiting it is kept for the next claim for SPARE_LINGER seconds at most, then
given back to the fleet.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

from dispatcher.policy.model import Slot

MAX_PASSES: Final = 32
"""Requests a slot serves in a row in one dispatcher before it goes back to the fleet."""

SPARE_LINGER: Final = 0.25
"""Seconds a slot with no request in it is kept for the claims that follow, at most: a
steady trickle of events reuses it rather than leasing and giving back a slot each (two
writes of its row), yet an idle dispatcher soon hands it back to the fleet."""


def slots_json(slots: Iterable[Slot]) -> str:
    """Slots as the queries take them: a JSON array of [endpoint_id, slot, token]."""
    return json.dumps([[s.endpoint_id, s.slot, str(s.token)] for s in slots])


class SlotBook:
    """Every request slot this dispatcher holds, from the claim that granted it until the
    complete statement that freed it ran: what maintenance extends the leases of, and
    (``spares``) those held with no request in them.

    The claimer enters what a claim granted (:meth:`hold`), the completer
    forgets what it freed (:meth:`freed`), maintenance reads :meth:`held`, and
    the requests in flight keep and take the spare ones.
    """

    def __init__(self) -> None:
        self._held: set[Slot] = set()
        self.spares = Spares()

    def hold(self, slot: Slot) -> None:
        """A claim granted ``slot``: its lease is extended until it is freed."""
        self._held.add(slot)

    def freed(self, slots: Iterable[Slot]) -> None:
        """The fleet has ``slots`` back (the complete statement freed them)."""
        self._held.difference_update(slots)

    def held(self) -> list[Slot]:
        """The slots whose leases to extend."""
        return list(self._held)


class Spares:
    """The slots this dispatcher holds with no request in them, and each slot's passes.

    Every time is passed in (monotonic seconds), so that the rule is tested
    without sleeping.
    """

    def __init__(self) -> None:
        self._by_endpoint: dict[int, list[Slot]] = {}
        self._since: dict[Slot, float] = {}  # when each became spare
        self._served: dict[Slot, int] = {}  # requests a slot served here in a row

    def counts(self) -> dict[int, int]:
        """Per endpoint with any: slots held with no request in them."""
        return {ep: len(spare) for ep, spare in self._by_endpoint.items() if spare}

    def endpoints(self) -> list[int]:
        """Endpoints with a spare slot."""
        return [ep for ep, spare in self._by_endpoint.items() if spare]

    def keep(self, slot: Slot, now: float) -> None:
        """Keep ``slot`` for the next claim, which the request's end wakes."""
        self._by_endpoint.setdefault(slot.endpoint_id, []).append(slot)
        self._since[slot] = now

    def take(self, endpoint_id: int) -> Slot | None:
        """A spare slot of this endpoint for a waiting request, or None."""
        spare = self._by_endpoint.get(endpoint_id)
        if not spare:
            return None
        slot = spare.pop()
        self._since.pop(slot, None)
        return slot

    def release(self, now: float, *, everything: bool = False) -> list[Slot]:
        """The slots kept SPARE_LINGER or longer (``everything``: all), forgotten here:
        the caller gives them back to the fleet."""
        given: list[Slot] = []
        for spare in self._by_endpoint.values():
            kept = []
            for slot in spare:
                if not everything and now - self._since[slot] < SPARE_LINGER:
                    kept.append(slot)
                    continue
                self._since.pop(slot, None)
                self._served.pop(slot, None)
                given.append(slot)
            spare[:] = kept
        return given

    def another_pass(self, slot: Slot) -> bool:
        """Whether ``slot`` may pass to one more request here (counting this pass), or has
        served MAX_PASSES requests in a row and goes back to the fleet: so that a
        dispatcher with a backlog of its own cannot keep an endpoint's slots from the
        other dispatchers for ever (they take it at their next claim, as may this one)."""
        served = self._served.get(slot, 0) + 1
        if served >= MAX_PASSES:
            self._served.pop(slot, None)
            return False
        self._served[slot] = served
        return True

    def ended(self, slot: Slot) -> None:
        """``slot`` goes back to the fleet: its run of passes is over."""
        self._served.pop(slot, None)
