"""The rate limit's Python half: the pace, and when the claimer looks again (the SQL half,
turns from the shared clock: tests/integration/test_fleet_sql.py)."""

from __future__ import annotations

import pytest

from dispatcher.limits import rate
from dispatcher.policy.model import Endpoint


def _endpoint(rate_limit: float | None) -> Endpoint:
    return Endpoint(id=1, name="e", url="http://127.0.0.1:9/", rate_limit=rate_limit)


def test_no_rate_limit_no_turn_to_wait_for() -> None:
    """An endpoint without --rate-limit is never throttled, and keeps its spare slots."""
    assert rate.next_look(_endpoint(None), 0.4) is None
    assert rate.keeps_spare_slots(_endpoint(None))


def test_the_next_look_is_the_next_turn_less_the_horizon() -> None:
    """With 10 a second, the turn after one waiting 0.4 s is 0.5 s away: look at 0.25 s."""
    assert rate.next_look(_endpoint(10), 0.4) == pytest.approx(0.5 - rate.RATE_HORIZON)
    assert not rate.keeps_spare_slots(_endpoint(10))


def test_the_pace_is_a_twentieth_slower_than_the_limit() -> None:
    """N + 1 requests span 1.05 s, so a request 50 ms late breaks no one-second window."""
    assert rate.PACE == 1.05
