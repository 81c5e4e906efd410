"""What one claim asks for, per endpoint: request slots, prefetch, rows; and fairness.

Pure bookkeeping, no I/O, so the claimer's sizing can be read (and tested)
on its own. The fleet's limits (``--max-in-flight``, ``--rate-limit``, the
circuit) are decided by the claim statement in the database, which grants at
most what is asked here; the dispatcher only bounds what it asks by what it
can use:

- **requests**: slots it could start now: the endpoint's ``--max-in-flight``
  minus its requests already running here, within the free part of
  ``--concurrency``;
- **held**: requests running here beyond the groups already waiting for them
  (each such request may pass its slot to one waiting group when it ends);
- **prefetch**: groups it may keep waiting in memory, one round at most per
  endpoint and ``--concurrency`` in all (``PREFETCH``), so that one claim
  serves several rounds of requests instead of one; a rate-limited endpoint
  does not prefetch (its requests go at their turns);
- **rows**: a cap, so that a claim takes at most ``--batch-size`` rows.

The endpoint order rotates, so that under a full load no endpoint always
comes first for the process's free slots and rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatcher.policy.model import Endpoint

PREFETCH = 2
"""Rounds of requests an endpoint may hold: one running, one waiting in memory."""


@dataclass(slots=True)
class Plan:
    """The parameters of one claim, per endpoint side by side."""

    endpoint_ids: list[int] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    prefetch: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)

    def params(self) -> dict[str, Any]:
        """The claim query's per-endpoint parameters."""
        return {"endpoint_ids": self.endpoint_ids, "requests": self.requests,
                "held": self.held, "prefetch": self.prefetch, "rows": self.rows}

    def wanted(self) -> dict[int, int]:
        """Rows asked for, per endpoint."""
        return dict(zip(self.endpoint_ids, self.rows, strict=True))


class Quotas:
    def __init__(self) -> None:
        # Endpoints whose last claim took all it asked for: more may be due.
        self.backlogged: set[int] = set()
        self._rotate = 0

    def plan(self, active: Sequence[Endpoint], running: Mapping[int, int],
             waiting: Mapping[int, int], concurrency: int, batch_size: int) -> Plan:
        """What to ask each endpoint for; ``running`` and ``waiting`` count what is held here."""
        plan = Plan()
        if active:
            self._rotate = (self._rotate + 1) % len(active)
            active = [*active[self._rotate:], *active[:self._rotate]]
        free = concurrency - sum(running.values())
        room = (PREFETCH - 1) * concurrency - sum(waiting.values())
        rows_left = batch_size
        for ep in active:
            if rows_left <= 0:
                break
            ran, waits = running.get(ep.id, 0), waiting.get(ep.id, 0)
            requests = max(0, min(ep.max_in_flight - ran, free))
            held = max(0, ran - waits)
            prefetch = 0 if ep.rate_limit is not None else max(0, min(ep.max_in_flight, room))
            groups = requests + min(prefetch, held + requests)
            if groups <= 0:
                continue
            rows = min(groups * ep.max_batch, rows_left)
            free -= requests
            room -= min(prefetch, held + requests)
            rows_left -= rows
            plan.endpoint_ids.append(ep.id)
            plan.requests.append(requests)
            plan.held.append(held)
            plan.prefetch.append(prefetch)
            plan.rows.append(rows)
        return plan

    def claimed(self, plan: Plan, got: Mapping[int, int]) -> bool:
        """Note what a claim returned; True when some endpoint filled its quota."""
        full = False
        for endpoint_id, limit in plan.wanted().items():
            if got.get(endpoint_id, 0) >= limit:
                self.backlogged.add(endpoint_id)
                full = True
            else:
                self.backlogged.discard(endpoint_id)
        return full
