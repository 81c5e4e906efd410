"""What one claim asks for, per endpoint: request slots, prefetch, rows; and whose turn it is.

Pure bookkeeping, no I/O, so the claimer's sizing can be read (and tested)
on its own. The fleet's limits (``--max-in-flight``, ``--rate-limit``, the
circuit) are decided by the claim statement in the database, which grants at
most what is asked here; the dispatcher only bounds what it asks by what it
can use.

Which endpoints a claim looks at: those with due work, found by the walk
(``limits.walk``, in id order from its cursor), plus those with requests
running here (they may take prefetched groups). So a claim costs what the
work costs, not what the number of endpoints is, and when more endpoints
have work than the dispatcher has request slots they take turns: the walk's
cursor moves past the endpoints served, and the next claim starts after them.

Per endpoint:

- **requests**: slots it could start now, shared out in turns: one each in
  cursor order, then a second each, and so on, each endpoint up to its
  ``--max-in-flight`` minus its requests already running here, until the
  free part of ``--concurrency`` is used up. An endpoint with a backlog
  never takes slots that another endpoint with due work would get in the
  same claim;
- **held**: requests running here beyond the groups already waiting for them
  (each such request may pass its slot to one waiting group when it ends);
- **prefetch**: groups it may keep waiting in memory, one round at most per
  endpoint and ``--concurrency`` in all (``PREFETCH``), so that one claim
  serves several rounds of requests instead of one; a rate-limited endpoint
  does not prefetch (its requests go at their turns). A slot thus serves at
  most its request and one prefetched successor before it goes back to the
  fleet, unless a later claim looks at the endpoint again;
- **rows**: a cap, so that a claim takes at most ``--batch-size`` rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatcher.policy.model import Endpoint

PREFETCH = 2
"""Rounds of requests an endpoint may hold: one running, one waiting in memory."""
BATCH_BYTES = 4 * 1024 * 1024
"""Payload bytes one batched request carries at most (one event larger than this goes
alone): a request is held in memory a few times over while it is built, signed and sent."""
HELD_BYTES = 32 * 1024 * 1024
"""Payload bytes the dispatcher holds at most in claimed deliveries, running or waiting:
a claim brings what is left of it (and always one event, whatever its size, when nothing
is held), the claim statement's byte budget. Counted in bytes, by the database, so that
``--batch-size`` large events never come at once: 300 of 1 MiB took 618 MiB resident
where the manifests allow 256. Small events are never cut by it: 1,000 events of 2 KiB
are 2 MiB."""


@dataclass(slots=True)
class Plan:
    """The parameters of one claim, per endpoint side by side."""

    endpoint_ids: list[int] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    prefetch: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    starved: bool = False  # an endpoint with due work got no slot here

    def params(self) -> dict[str, Any]:
        """The claim query's per-endpoint parameters."""
        return {"endpoint_ids": self.endpoint_ids, "requests": self.requests,
                "held": self.held, "prefetch": self.prefetch, "rows": self.rows}

    def wanted(self) -> dict[int, int]:
        """Rows asked for, per endpoint."""
        return dict(zip(self.endpoint_ids, self.rows, strict=True))


def share(free: int, caps: Sequence[int]) -> list[int]:
    """``free`` slots dealt out in turns: one each in order, then a second each, ...

    Each share stays within its cap; what no cap can take is left over.
    """
    shares = [0] * len(caps)
    open_ = [i for i, cap in enumerate(caps) if cap > 0]
    while free > 0 and open_:
        level = min(free // len(open_), *(caps[i] - shares[i] for i in open_))
        if level == 0:  # fewer slots than takers: one each, in order
            for i in open_[:free]:
                shares[i] += 1
            break
        for i in open_:
            shares[i] += level
        free -= level * len(open_)
        open_ = [i for i in open_ if shares[i] < caps[i]]
    return shares


class Quotas:
    """Sizes each claim."""

    def plan(self, due: Sequence[Endpoint], busy: Sequence[Endpoint], *,
             running: Mapping[int, int], waiting: Mapping[int, int], concurrency: int,
             batch_size: int, more_due: bool = False,
             spare: Mapping[int, int] | None = None) -> Plan:
        """What to ask each endpoint for.

        ``due``: endpoints with due work, in turn order; ``busy``: others with
        requests running here; ``running`` and ``waiting`` count what is held
        here; ``more_due``: the walk stopped at its limit, others may be due;
        ``spare``: slots held here with no request in them (counted in
        ``running`` too).

        An endpoint with spare slots (and no rate limit, whose turns come with
        new requests only) asks for no new slot, only for groups to
        fill them (and to follow its running requests): a slot leased and given
        back costs two writes of its row, and each write leaves a version that
        the claims' look for free slots walks while the MVCC horizon is held
        back. If the claim fills them, more may be due, and the next claim,
        right after, asks for new slots as usual.

        While an endpoint with due work is left without any slot, no endpoint
        keeps a slot beyond one prefetched successor of a request this claim
        grants: requests running here take no waiting group, so their slots
        come back to the fleet as they end and go round in turn.
        """
        plan = Plan()
        candidates = [*due, *busy]
        free = concurrency - sum(running.values())
        spare = spare or {}
        caps = [0 if spare.get(ep.id) and ep.rate_limit is None
                else ep.max_in_flight - running.get(ep.id, 0) for ep in candidates]
        requests = share(free, caps)
        starved = (any(n == 0 and cap > 0 and not running.get(ep.id)
                       for ep, n, cap in zip(due, requests, caps, strict=False))
                   or (more_due and sum(requests) >= free))
        plan.starved = starved
        room = (PREFETCH - 1) * concurrency - sum(waiting.values())
        rows_left = batch_size
        for ep, asked in zip(candidates, requests, strict=True):
            if rows_left <= 0:
                break
            ran, waits = running.get(ep.id, 0), waiting.get(ep.id, 0)
            held = 0 if starved else max(0, ran - waits)
            prefetch = 0 if ep.rate_limit is not None else max(0, min(ep.max_in_flight, room))
            groups = asked + min(prefetch, held + asked)
            if groups <= 0:
                continue
            rows = min(groups * ep.max_batch, rows_left)
            room -= min(prefetch, held + asked)
            rows_left -= rows
            plan.endpoint_ids.append(ep.id)
            plan.requests.append(asked)
            plan.held.append(held)
            plan.prefetch.append(prefetch)
            plan.rows.append(rows)
        return plan

    @staticmethod
    def claimed(plan: Plan, got: Mapping[int, int]) -> bool:
        """True when some endpoint filled its quota: more may be due."""
        return any(got.get(endpoint_id, 0) >= limit
                   for endpoint_id, limit in plan.wanted().items())
