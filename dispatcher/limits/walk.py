"""The walk for due work: which endpoints a claim looks at, and from where the next walk goes.

A claim asks only the endpoints with due work (and those busy here), so
that its cost follows the work, not the number of endpoints. The
``due_endpoints`` statement (dispatch.sql) finds them: in id order from a
cursor, at most STEPS endpoints with pending rows looked at per run (their
rows may all wait on retries), stopping once it has found as many due as
the dispatcher has request slots. The cursor moves past the endpoints each
claim gave a request slot, so that when more endpoints have due work than
the dispatcher has slots they take turns.

A run that finds nothing due but stopped at its step limit goes on from
where it stopped, LAPS runs at most per walk; endpoints this process cannot
sign for (or has not loaded yet) are passed over: the database may count
them, the claim cannot use them. What a walk found serves the claims of the
next GAP seconds, while every endpoint it found still had rows and none was
left unseen.

Pure bookkeeping: the claimer hands the walk ``fetch`` (one run of the
statement) and ``usable`` (an endpoint this process can serve, or None),
and the clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from dispatcher.policy.model import Endpoint

STEPS: Final = 256
"""Endpoints with pending rows one ``due_endpoints`` run looks at, at most: a claim's cost
stays bounded however many endpoints wait on retries; the next run goes on from there."""
LAPS: Final = 64
"""Runs one walk may make while they find nothing due (a lap of 16,384 endpoints)."""
GAP: Final = 0.02
"""Seconds a walk's findings serve the claims that follow, while every endpoint it found
got its slots: fresh work elsewhere waits at most this long, under load only."""

Step = tuple[int, bool, int]
"""One row of ``due_endpoints``: endpoint id, whether it is due, steps taken up to it."""
Fetch = Callable[[int, int], Awaitable[Sequence[Step]]]
"""One run of ``due_endpoints``: from after the endpoint id given, at most the steps given."""
Usable = Callable[[int], Endpoint | None]
"""The endpoint of an id, when this process can serve it; else None."""


@dataclass(slots=True)
class Walk:
    """What the last walk found, kept for the claims right after it, and the cursor.

    ``want``: due endpoints a run stops at (the dispatcher's ``--concurrency``).
    """

    usable: Usable
    want: int
    cursor: int = -1
    """The last endpoint given a request slot: the next walk starts after it."""
    due: list[Endpoint] = field(default_factory=list)
    more: bool = False  # it stopped at a limit: other endpoints may have due work
    at: float = float("-inf")  # when, on the monotonic clock

    def stale(self, now: float) -> bool:
        """Whether the next claim walks again: the last walk is older than GAP, found
        nothing, or left endpoints unseen."""
        return not self.due or self.more or now - self.at >= GAP

    async def look(self, now: float, fetch: Fetch) -> None:
        """Walk from the cursor: runs of ``fetch`` until one finds a usable endpoint due
        or reaches the end of its lap, LAPS at most."""
        after = self.cursor
        found: list[Endpoint] = []
        stopped = False
        for _ in range(LAPS):
            rows = await fetch(after, STEPS)
            eligible = [ep_id for ep_id, ok, _ in rows if ok]
            # Stopped at a limit, not at the end of its lap: others may be due.
            stopped = bool(rows) and (rows[-1][2] >= STEPS or len(eligible) >= self.want)
            found = [ep for ep_id in eligible if (ep := self.usable(ep_id)) is not None]
            if found or not stopped:
                break
            after = self.cursor = rows[-1][0]  # nothing yet: walk on from there
        self.due, self.more, self.at = found, stopped, now

    def served(self, endpoint_ids: Sequence[int], requests: Sequence[int]) -> None:
        """Move the cursor past the due endpoints a claim asked request slots for
        (``endpoint_ids`` and ``requests`` side by side, as a plan has them)."""
        asked = {ep_id for ep_id, n in zip(endpoint_ids, requests, strict=True) if n}
        for ep in reversed(self.due):
            if ep.id in asked:
                self.cursor = ep.id
                return

    def ran_dry(self, asked: Sequence[int], got: Mapping[int, int]) -> None:
        """Endpoints a claim found nothing for drop out until the next walk."""
        dry = {ep_id for ep_id in asked if not got.get(ep_id)}
        if dry:
            self.due = [ep for ep in self.due if ep.id not in dry]
