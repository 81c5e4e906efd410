"""The walk for due work: its runs, laps, gap and cursor, with a fake statement."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from dispatcher.limits.walk import GAP, LAPS, STEPS, Step, Walk
from dispatcher.policy.model import Endpoint


def _ep(ep_id: int) -> Endpoint:
    return Endpoint(id=ep_id, name=f"e{ep_id}", url="http://127.0.0.1/")


class FakeWalkStatement:
    """``due_endpoints`` over a table of endpoints with pending rows: ids ascending from
    after the cursor, round once; each endpoint with pending rows costs a step."""

    def __init__(self, pending: Sequence[int], due: set[int], want: int) -> None:
        self.pending = sorted(pending)
        self.due = due
        self.want = want
        self.runs: list[tuple[int, int]] = []

    async def __call__(self, after: int, steps: int) -> Sequence[Step]:
        self.runs.append((after, steps))
        ring = [i for i in self.pending if i > after] + [i for i in self.pending if i <= after]
        rows: list[Step] = []
        found = 0
        for taken, ep_id in enumerate(ring[:steps], start=1):
            ok = ep_id in self.due
            rows.append((ep_id, ok, taken))
            found += ok
            if found >= self.want:
                break
        return rows


def _usable(ep_id: int) -> Endpoint | None:
    return _ep(ep_id)


def _look(walk: Walk, fetch: FakeWalkStatement, now: float = 0.0) -> None:
    asyncio.run(walk.look(now, fetch))


def test_a_walk_finds_the_due_endpoints_after_the_cursor_in_turn() -> None:
    """The endpoints due come in id order from after the cursor, round once."""
    fetch = FakeWalkStatement(range(1, 11), due={2, 5, 9}, want=8)
    walk = Walk(_usable, want=8, cursor=5)
    _look(walk, fetch)
    assert [ep.id for ep in walk.due] == [9, 2, 5]
    assert not walk.more
    assert fetch.runs == [(5, STEPS)]


def test_a_walk_stopped_at_its_want_says_others_may_be_due() -> None:
    """Finding as many due as the dispatcher has slots stops the walk: more may be due."""
    fetch = FakeWalkStatement(range(1, 11), due=set(range(1, 11)), want=3)
    walk = Walk(_usable, want=3)
    _look(walk, fetch)
    assert [ep.id for ep in walk.due] == [1, 2, 3]
    assert walk.more


def test_a_run_that_finds_nothing_at_its_step_limit_walks_on_from_where_it_stopped() -> None:
    """Endpoints whose rows all wait cost steps; the next run starts after the last looked at."""
    fetch = FakeWalkStatement(range(1, 2 * STEPS + 11), due={2 * STEPS + 5}, want=4)
    walk = Walk(_usable, want=4)
    _look(walk, fetch)
    assert [after for after, _ in fetch.runs] == [-1, STEPS, 2 * STEPS]
    assert [ep.id for ep in walk.due] == [2 * STEPS + 5]
    assert walk.cursor == 2 * STEPS  # the cursor moved with the runs that found nothing


def test_a_walk_makes_laps_runs_at_most() -> None:
    """Nothing due among many endpoints: the walk gives up after LAPS runs, saying more."""
    fetch = FakeWalkStatement(range(1, (LAPS + 2) * STEPS), due=set(), want=4)
    walk = Walk(_usable, want=4)
    _look(walk, fetch)
    assert len(fetch.runs) == LAPS
    assert walk.due == []
    assert walk.more


def test_endpoints_this_process_cannot_use_are_passed_over() -> None:
    """An endpoint ``usable`` refuses is not found; the walk goes on while the run stopped."""
    fetch = FakeWalkStatement(range(1, 11), due={1, 2, 3, 4, 5}, want=2)
    walk = Walk(lambda ep_id: _ep(ep_id) if ep_id > 2 else None, want=2)
    _look(walk, fetch)
    assert [after for after, _ in fetch.runs] == [-1, 2]
    assert [ep.id for ep in walk.due] == [3, 4]


def test_a_walk_serves_the_claims_of_the_next_gap_seconds() -> None:
    """Fresh findings that left nobody unseen serve the claims of the next GAP seconds."""
    fetch = FakeWalkStatement(range(1, 11), due={4}, want=8)
    walk = Walk(_usable, want=8)
    assert walk.stale(0.0)
    _look(walk, fetch, now=10.0)
    assert not walk.stale(10.0 + GAP / 2)
    assert walk.stale(10.0 + 2 * GAP)


def test_a_walk_that_found_nothing_or_left_some_unseen_is_stale_at_once() -> None:
    """No findings, or a walk stopped at a limit, make the next claim walk again."""
    walk = Walk(_usable, want=3)
    _look(walk, FakeWalkStatement(range(1, 11), due=set(), want=3), now=5.0)
    assert walk.stale(5.0)
    _look(walk, FakeWalkStatement(range(1, 11), due=set(range(1, 11)), want=3), now=5.0)
    assert walk.more
    assert walk.stale(5.0)


def test_the_cursor_moves_past_the_last_endpoint_given_a_slot() -> None:
    """Under a full load the next walk starts after the last endpoint given a request slot."""
    walk = Walk(_usable, want=2, due=[_ep(1), _ep(2), _ep(3)])
    walk.served([1, 2, 3], [1, 1, 0])
    assert walk.cursor == 2
    walk.served([3], [0])  # no slot asked: the cursor stays
    assert walk.cursor == 2


def test_endpoints_a_claim_found_nothing_for_drop_out_until_the_next_walk() -> None:
    """An endpoint asked for rows that got none is no longer offered by these findings."""
    walk = Walk(_usable, want=4, due=[_ep(1), _ep(2), _ep(3)])
    walk.ran_dry([1, 2], {1: 5})
    assert [ep.id for ep in walk.due] == [1, 3]
