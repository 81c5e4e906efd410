"""Where each endpoint's claim starts: a floor never past a row it could still miss."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from dispatcher.policy.floors import HEAD, HEAD_EVERY, LAG, SETTLE_MARGIN, Floors
from dispatcher.policy.model import ClaimRow

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(seconds=10)  # a claim's now(), well after the rows it left


def _row(endpoint_id: int, next_pending: datetime | None, *, now: datetime, xmin: int,
         xmax: int) -> ClaimRow:
    return ClaimRow(id=1, endpoint_id=endpoint_id, attempts=1, lease_token=uuid.uuid4(),
                    event_id=uuid.uuid4(), type="t", key=None, payload="{}", headers=None,
                    created_at=T0, grp=0, slot=0, slot_token=uuid.uuid4(), send_in=0.0,
                    probe=False, age=0.0, traceparent=None, tracestate=None, size=2,
                    next_pending=next_pending, db_now=now, xmin=xmin, xmax=xmax, tenant=None)


def test_an_endpoint_is_claimed_from_the_head_until_a_claim_has_set_its_floor() -> None:
    """No floor yet: the claim scans from the index's head."""
    assert Floors().for_claim([1, 2], now=0.0) == [HEAD, HEAD]


def test_the_floor_moves_to_the_first_row_not_taken_when_no_transaction_was_running() -> None:
    """xmin = xmax (nothing running): the bound is the claim's own now(), less the margin,
    and the floor the earliest pending row the claim left."""
    floors = Floors()
    asked = floors.for_claim([1], now=0.0)
    left = T0 + timedelta(seconds=3)
    floors.claimed([1], asked, [_row(1, left, now=T0 + timedelta(seconds=10), xmin=100,
                                     xmax=100)])
    assert floors.for_claim([1], now=0.1) == [left]
    floors.claimed([1], [left], [_row(1, None, now=T0 + timedelta(seconds=11), xmin=105,
                                      xmax=105)])
    assert floors.for_claim([1], now=0.2) == [T0 + timedelta(seconds=11) - SETTLE_MARGIN]


def test_a_transaction_still_running_holds_the_floor_before_it_began() -> None:
    """A claim whose snapshot saw a transaction running (xmin below its xmax) bounds the
    floor by the latest earlier claim that transaction began after, not by its own now()."""
    floors = Floors()
    asked = floors.for_claim([1], now=0.0)
    floors.claimed([1], asked, [_row(1, None, now=T0, xmin=100, xmax=100)])
    later = T0 + timedelta(seconds=1)
    # Transaction 101 began after the first claim's snapshot and is still running.
    floors.claimed([1], floors.for_claim([1], now=0.1),
                   [_row(1, None, now=later, xmin=101, xmax=103)])
    assert floors.for_claim([1], now=0.2) == [T0 - SETTLE_MARGIN]
    # 101 ended: the second claim now bounds it.
    floors.claimed([1], floors.for_claim([1], now=0.3),
                   [_row(1, None, now=later + timedelta(seconds=1), xmin=103, xmax=104)])
    assert floors.for_claim([1], now=0.4) == [later - SETTLE_MARGIN]


def test_a_transaction_open_for_long_holds_the_floor_back_no_more_than_the_lag() -> None:
    """A writer open for minutes: the floor follows the newest claim at LAG behind."""
    floors = Floors()
    floors.claimed([1], floors.for_claim([1], now=0.0),
                   [_row(1, None, now=T0, xmin=50, xmax=100)])
    much_later = T0 + timedelta(minutes=5)
    floors.claimed([1], floors.for_claim([1], now=0.1),
                   [_row(1, None, now=much_later, xmin=50, xmax=900)])
    assert floors.for_claim([1], now=0.2) == [much_later - LAG]


def test_every_endpoint_is_claimed_from_the_head_at_least_every_head_every_seconds() -> None:
    """Rows behind a floor (a late commit, a rescued lease) are found within HEAD_EVERY."""
    floors = Floors()
    asked = floors.for_claim([1], now=0.0)
    floors.claimed([1], asked, [_row(1, T0, now=LATER, xmin=1, xmax=1)])
    assert floors.for_claim([1], now=HEAD_EVERY / 2) == [T0]
    assert floors.for_claim([1], now=HEAD_EVERY) == [HEAD]
    assert floors.for_claim([1], now=HEAD_EVERY + 0.1) == [T0]


def test_a_floor_never_moves_back_and_endpoints_without_rows_keep_theirs() -> None:
    """A claim that left an earlier row than the floor it started from (another claimer's
    rolled-back lock) keeps the floor; an endpoint asked but given no rows keeps its own."""
    floors = Floors()
    start = floors.for_claim([1, 2], now=0.0)
    floors.claimed([1, 2], start, [_row(1, T0, now=LATER, xmin=1, xmax=1),
                                   _row(2, T0, now=LATER, xmin=1, xmax=1)])
    floors.claimed([1, 2], [T0, T0], [_row(1, T0 - timedelta(seconds=1), now=LATER,
                                           xmin=2, xmax=2)])
    assert floors.for_claim([1, 2], now=0.1) == [T0, T0]


def test_the_walk_looks_from_the_floors_of_the_endpoints_claimed_last_and_from_the_head_each_second(
        ) -> None:
    """for_walk: floored endpoints in ascending id, each left out (walked from the head)
    once every HEAD_EVERY seconds on a clock of its own."""
    floors = Floors()
    start = floors.for_claim([2, 1], now=0.0)
    floors.claimed([2, 1], start, [_row(2, T0, now=LATER, xmin=1, xmax=1),
                                   _row(1, T0, now=LATER, xmin=1, xmax=1)])
    assert floors.for_walk(now=0.0) == ([], [])  # never walked from the head yet
    assert floors.for_walk(now=0.5) == ([1, 2], [T0, T0])
    assert floors.for_walk(now=HEAD_EVERY) == ([], [])
    assert floors.for_claim([1], now=0.5) == [T0]  # the claims' clock is apart
