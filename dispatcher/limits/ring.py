"""Fair rounds between the tenants of one endpoint: where in the ring the next claim starts.

The rule is enforced in SQL, by ``outbox.tenant_turns_v1`` (schema.sql),
which the claim statement (``claim`` in dispatch.sql) calls per endpoint: it
walks the tenants with due work in a ring (names in the database's order,
then the deliveries without a tenant, which count as one tenant), from the
one after the tenant served last, and deals the request slots and prefetched
groups it may fill in rounds: one per tenant in that order, then a second
each to those with more due, and so on; a batch holds one tenant's events.
(A rate limit's *turns* are another thing: moments on the fleet's shared
clock, ``limits.rate``.) The walk stops after as many tenants with due work
and nothing in flight as the claim has requests to deal, or after RING_STEPS
tenants looked at, so a claim's cost does not grow with the number of
tenants: the next claim goes on from where this one left. This module is the
Python half: the cursor, one per endpoint, moved past the tenant of the last
request each claim formed.

In a fleet, each dispatcher keeps its own cursor, and the claim counts each
tenant's requests in flight anywhere in the fleet (its in-flight rows): a
tenant with k requests running or waiting is dealt its next request k rounds
later, so a tenant that other dispatchers are serving yields to one that
nobody is. In memory, a group waiting for a slot goes ahead of the groups of
tenants that already have more waiting (:func:`place`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

RING_STEPS: Final = 128
"""Tenants with pending rows one claim's walk looks at per endpoint, at most: those whose
rows all wait (retries backing off) cost a step each; the next claim goes on after them."""


@dataclass(frozen=True, slots=True)
class Served:
    """The tenant an endpoint's next walk round the ring starts after (``untenanted``: the
    deliveries without a tenant; neither: the start of the ring)."""

    tenant: str | None = None
    untenanted: bool = False


START: Final = Served()


class _Row(Protocol):
    @property
    def endpoint_id(self) -> int: ...
    @property
    def grp(self) -> int: ...
    @property
    def tenant(self) -> str | None: ...


class Ring:
    """Per endpoint, the tenant served last by this dispatcher's claims."""

    def __init__(self) -> None:
        self._last: dict[int, Served] = {}

    def for_claim(self, endpoint_ids: Sequence[int]) -> dict[str, Any]:
        """The claim's cursor parameters, side by side with its endpoints."""
        served = [self._last.get(endpoint_id, START) for endpoint_id in endpoint_ids]
        return {"ring_after": [s.tenant for s in served],
                "ring_null": [s.untenanted for s in served],
                "ring_steps": RING_STEPS}

    def claimed(self, rows: Iterable[_Row]) -> None:
        """Move each endpoint's cursor to the tenant of its last request in this claim."""
        last: dict[int, tuple[int, str | None]] = {}
        for row in rows:
            seen = last.get(row.endpoint_id)
            if seen is None or row.grp >= seen[0]:
                last[row.endpoint_id] = (row.grp, row.tenant)
        for endpoint_id, (_, tenant) in last.items():
            self._last[endpoint_id] = Served(tenant, tenant is None)


class _Tenanted(Protocol):
    @property
    def tenant(self) -> str | None: ...


def place(waiting: Sequence[_Tenanted], tenant: str | None) -> int:
    """Where a group of ``tenant`` joins an endpoint's groups waiting for a slot.

    Waiting groups are kept in rounds: each tenant's first waiting group, then
    each one's second, and so on, in the order they came. A new group goes at
    the end of its tenant's next round, so a tenant that just got due work
    waits behind at most one group of each other tenant, however many
    another has waiting.
    """
    tenants = [group.tenant for group in waiting]
    counts = Counter(tenants)  # counted in C
    mine = counts[tenant]
    if not tenants or mine + 1 >= max(counts.values()):
        return len(tenants)  # no round after its own has begun: the end
    seen: dict[str | None, int] = {}
    for index, other in enumerate(tenants):
        round_ = seen.get(other, 0)
        seen[other] = round_ + 1
        if round_ > mine:
            return index
    return len(tenants)
