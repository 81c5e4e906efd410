"""The rate limit's Python half: the pace, and spare slots (when the claimer looks again,
against the statement's turns: tests/integration/test_rate_pace.py; the SQL half, turns
from the shared clock: tests/integration/test_fleet_sql.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatcher.limits import rate
from dispatcher.policy.model import Endpoint


def _endpoint(rate_limit: float | None) -> Endpoint:
    return Endpoint(id=1, name="e", url="http://127.0.0.1:9/", rate_limit=rate_limit)


def test_no_rate_limit_no_turn_to_wait_for() -> None:
    """An endpoint without --rate-limit is never throttled, and keeps its spare slots."""
    assert rate.next_look(_endpoint(None), 0.4) is None
    assert rate.keeps_spare_slots(_endpoint(None))


def test_a_rate_limited_endpoint_gives_its_slots_back() -> None:
    """Under --rate-limit a slot whose request ended goes back: turns come with new requests."""
    assert not rate.keeps_spare_slots(_endpoint(10))


def test_the_pace_is_a_twentieth_slower_than_the_limit() -> None:
    """N + 1 requests span 1.05 s, so a request 50 ms late breaks no one-second window."""
    assert rate.PACE == 1.05


def test_a_turn_is_missed_when_its_request_would_leave_more_than_late_after_it() -> None:
    """The last moment: the claim's start, the turn's distance from the statement's start,
    the slack; the way to the database counts only once enough claims were timed."""
    db_now = datetime(2026, 1, 1, tzinfo=UTC)
    turn_at = db_now + timedelta(seconds=0.2)
    turns = rate.Turns()
    assert turns.last_moment(100.0, db_now, turn_at) == pytest.approx(100.0 + 0.2 + rate.LATE)
    for _ in range(rate.TRIPS_TRUSTED - 1):
        turns.claimed(0.0, 0.5)  # slow first claims: not taken for the way there
    assert turns.last_moment(100.0, db_now, turn_at) == pytest.approx(100.0 + 0.2 + rate.LATE)
    turns.claimed(0.0, 0.01)
    assert turns.last_moment(100.0, db_now, turn_at) == pytest.approx(
        100.0 + 0.005 + 0.2 + rate.LATE)
