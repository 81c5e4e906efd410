"""The claims and request slots this dispatcher holds, and how long their leases run.

A delivery is held from its claim until its result is written (or it is
handed back): while its request runs, and while its result waits for the
database. A request slot (``--max-in-flight``, shared by the fleet) is held
from the claim that granted it until the request that used it ends and no
waiting request takes it over. Maintenance extends the leases of everything
held, so a slow endpoint or a database outage never lets another dispatcher
take over what this one still works on; a dispatcher that dies stops
extending, and both come back to the fleet when their leases run out.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from dispatcher.policy.model import Delivery, Slot

LEASE_MARGIN = 15.0
"""Seconds a lease outlasts the longest endpoint timeout, whatever --lease says."""


class Leases:
    """Held deliveries (id -> lease token), the slots held, and the lease length to use."""

    def __init__(self, configured: float, longest_timeout: Callable[[], float],
                 slots: Callable[[], Iterable[Slot]] = tuple) -> None:
        """``slots``: the request slots held (``limits.slots.SlotBook.held``)."""
        self._configured = configured
        self._longest_timeout = longest_timeout
        self._held: dict[int, uuid.UUID] = {}
        self._slots = slots

    def seconds(self) -> float:
        """--lease, but never less than the longest endpoint timeout plus a margin."""
        return max(self._configured, self._longest_timeout() + LEASE_MARGIN)

    def hold(self, delivery: Delivery) -> None:
        self._held[delivery.id] = delivery.lease_token

    def drop(self, delivery_ids: Iterable[int]) -> None:
        """Forget deliveries whose result was written or which were handed back."""
        for delivery_id in delivery_ids:
            self._held.pop(delivery_id, None)

    def held(self) -> tuple[list[int], list[uuid.UUID], list[Slot]]:
        """Ids and tokens of the deliveries held, side by side, and the slots held."""
        return list(self._held), list(self._held.values()), list(self._slots())

    def __len__(self) -> int:
        return len(self._held)
