"""The per-endpoint token bucket behind --rate-limit, on a fake clock."""

from __future__ import annotations

import pytest

from dispatcher.policy.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_idle_bucket_allows_one_request_not_a_burst() -> None:
    """However long an endpoint was idle, only one request may start at once."""
    clock = Clock()
    bucket = TokenBucket(10, clock)
    clock.now += 3600
    assert bucket.available() == 1


def test_requests_are_spaced_one_over_rate_apart() -> None:
    """Taking tokens back to back queues them 1/rate apart: no second holds more than rate + 1."""
    bucket = TokenBucket(10, Clock())
    waits = [bucket.take() for _ in range(20)]
    assert waits == pytest.approx([n / 10 for n in range(20)])


def test_available_within_a_horizon_counts_queued_requests() -> None:
    """available(horizon) is what may start within horizon seconds after those already queued."""
    clock = Clock()
    bucket = TokenBucket(10, clock)
    assert bucket.available(0.25) == 3
    for _ in range(3):
        bucket.take()
    assert bucket.available(0.25) == 0
    assert bucket.wait(0.25) == pytest.approx(0.05)
    clock.now += 0.05
    assert bucket.available(0.25) == 1


def test_slow_rates_still_allow_one_request() -> None:
    """A rate below one per second still lets one request start, then waits 1/rate."""
    bucket = TokenBucket(0.5, Clock())
    assert bucket.available() == 1
    assert bucket.take() == 0.0
    assert bucket.wait() == pytest.approx(2.0)
