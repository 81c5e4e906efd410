"""Where each endpoint's claim starts its scan: a remembered floor, not the index's head.

The claim walks ``deliveries_pending`` (endpoint, next_attempt_at) of pending
rows in order. Every row claimed leaves an entry there whose old version
stays until vacuum removes it; while a snapshot elsewhere holds the MVCC
horizon back (an analytics query, ``pg_dump``, a connection idle in
transaction), none can be removed, and a scan from the head walks every row
claimed since the snapshot began: claims grow slower by the second and
delivery falls minutes behind. A claim that starts at a floor walks only
the entries of the last claims.

The floor is a lower bound of the next_attempt_at of every pending row the
dispatcher has not seen claimed. Each claim returns, per endpoint that took
rows, the earliest pending row from the floor on that it did not take; the
next floor is at most that, and at most the time before which no
transaction still running can have written a row: a publisher's transaction
stamps its rows when it publishes and they become visible when it commits,
later, possibly behind a floor already moved. A claim's snapshot says which
transactions were running (those from its xmin on); a transaction that got
its id after an earlier claim's snapshot was taken (id at or above that
snapshot's xmax) stamps its rows after that claim's now(). So the latest
earlier claim whose xmax is at or below the current xmin gives that time
(less SETTLE_MARGIN, for a stamp read in the statement that then took the
id). A writing transaction open for long would hold that bound back, and
with it every floor: the bound never lags more than LAG behind, and rows of
a transaction older than that wait for the next scan from the head, which
every endpoint gets at least every HEAD_EVERY seconds and which also finds
rows whose writes can go behind a floor elsewhere (a crashed dispatcher's
rolled-back claim, a lease rescued).

The floor never decides the order: the claim's check that no earlier
delivery of the key is pending or in flight looks at every row of the key.
Pure bookkeeping; the claimer passes the clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from dispatcher.policy.model import ClaimRow

HEAD_EVERY = 1.0
"""Seconds at most between two claims of an endpoint scanning from the index's head."""
SETTLE_MARGIN = timedelta(seconds=0.1)
"""Taken off a claim's now() before it bounds a floor: a publisher's rows may be stamped
by its statement's clock just before the statement takes its transaction id."""
LAG = timedelta(seconds=5)
"""How far behind the newest claim the bound of the floors may stay while a writing
transaction stays open: what it writes later is found by the next scan from the head."""
WALK_FLOORS = 64
"""Endpoints the walk for due work looks at from their floors, at most (those claimed last):
each step looks for the next of them, one by one."""
HISTORY = 4096
"""Claims remembered (their now() and snapshot xmax), at most: the oldest go first."""

HEAD = datetime.min.replace(tzinfo=UTC)
"""The floor of a scan from the index's head: before every stamp a row can have."""


class Floors:
    """Per endpoint, the floor its next claim starts from."""

    def __init__(self) -> None:
        self._floors: dict[int, datetime] = {}
        self._head_at: dict[int, float] = {}  # last claim from the head, monotonic
        self._walked_at: dict[int, float] = {}  # last walk from the head, monotonic
        self._claims: deque[tuple[int, datetime]] = deque(maxlen=HISTORY)  # (xmax, now())

    def for_claim(self, endpoint_ids: Sequence[int], now: float) -> list[datetime]:
        """The floors to pass to a claim of these endpoints at ``now`` (monotonic):
        HEAD for those not claimed from a floor yet or due a scan from the head."""
        floors = []
        for endpoint_id in endpoint_ids:
            floor = self._floors.get(endpoint_id)
            if floor is None or now - self._head_at.get(endpoint_id, float("-inf")) >= HEAD_EVERY:
                self._head_at[endpoint_id] = now
                floor = HEAD
            floors.append(floor)
        return floors

    def for_walk(self, now: float) -> tuple[list[int], list[datetime]]:
        """The endpoints (ascending) and floors the walk for due work looks from at ``now``.

        The endpoints claimed last, but each from the head at least every
        HEAD_EVERY seconds, on a clock of its own: an endpoint whose rows are
        all behind its floor is found by that walk, and its claim then comes
        from the head too (it has not been claimed for a while) or within a
        second (it has).
        """
        chosen: list[tuple[int, datetime]] = []
        for endpoint_id in reversed(self._floors):  # the last claimed first
            if len(chosen) >= WALK_FLOORS:
                break
            if now - self._walked_at.get(endpoint_id, float("-inf")) >= HEAD_EVERY:
                self._walked_at[endpoint_id] = now
                continue
            chosen.append((endpoint_id, self._floors[endpoint_id]))
        chosen.sort()
        return [endpoint_id for endpoint_id, _ in chosen], [floor for _, floor in chosen]

    def claimed(self, endpoint_ids: Iterable[int], floors: Sequence[datetime],
                rows: Sequence[ClaimRow]) -> None:
        """Move the floors after a claim that asked ``endpoint_ids`` from ``floors``
        and took ``rows`` (endpoints that took none keep theirs)."""
        if not rows:
            return
        first = rows[0]
        claims = self._claims
        if not claims or first.xmax > claims[-1][0]:
            claims.append((first.xmax, first.db_now))
        # The latest claim whose snapshot's xmax is at or below this one's xmin.
        while len(claims) > 1 and claims[1][0] <= first.xmin:
            claims.popleft()
        bound = first.db_now - LAG
        if claims[0][0] <= first.xmin:
            bound = max(bound, claims[0][1] - SETTLE_MARGIN)
        asked = dict(zip(endpoint_ids, floors, strict=True))
        pending: dict[int, datetime | None] = {row.endpoint_id: row.next_pending for row in rows}
        for endpoint_id, next_pending in pending.items():
            floor = bound if next_pending is None else min(bound, next_pending)
            # A floor only moves forward: rows behind the old one were seen claimed,
            # or are found by the scan from the head.
            old = asked.get(endpoint_id, HEAD)
            self._floors.pop(endpoint_id, None)  # to the end: claimed last
            self._floors[endpoint_id] = max(old, floor)
