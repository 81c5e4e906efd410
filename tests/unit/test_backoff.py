"""Retry timing: exponential growth, jitter bounds, Retry-After parsing and precedence."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from dispatcher.policy.backoff import (
    MAX_RETRY_AFTER,
    backoff_seconds,
    next_attempt_delay,
    parse_retry_after,
)
from dispatcher.policy.model import Endpoint
from outbox.endpoints import EndpointSpec

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
ENDPOINT = Endpoint(id=1, name="e", url="http://127.0.0.1:9/", min_backoff=2.0, max_backoff=60.0)


def middle() -> float:
    """Randomness that lands on the centre of the jitter band."""
    return 0.5


def lowest() -> float:
    """The smallest value random.random() can return."""
    return 0.0


def highest() -> float:
    """Just under the largest value random.random() can return."""
    return 0.999999


@pytest.mark.parametrize(("attempt", "expected"), [(1, 2.0), (2, 4.0), (3, 8.0), (5, 32.0)])
def test_backoff_doubles_from_min_backoff(attempt: int, expected: float) -> None:
    """Without jitter the delay is min_backoff doubled once per earlier failure."""
    assert backoff_seconds(attempt, 2.0, 600.0, middle) == expected


def test_jitter_stays_within_twenty_percent() -> None:
    """Jitter moves the delay by at most ±20 % of the exponential value."""
    assert backoff_seconds(3, 2.0, 600.0, lowest) == pytest.approx(8.0 * 0.8)
    assert backoff_seconds(3, 2.0, 600.0, highest) == pytest.approx(8.0 * 1.2, rel=1e-5)


def test_backoff_is_capped_at_max_backoff_even_with_jitter() -> None:
    """Late attempts wait max_backoff at most, whatever the randomness."""
    assert backoff_seconds(10, 2.0, 60.0, highest) == 60.0
    assert backoff_seconds(10, 2.0, 60.0, lowest) == pytest.approx(48.0)


def test_backoff_never_goes_below_min_backoff() -> None:
    """Jitter downwards on the first attempt still waits min_backoff."""
    assert backoff_seconds(1, 2.0, 60.0, lowest) == 2.0


def test_huge_attempt_numbers_do_not_overflow() -> None:
    """An attempt count far beyond float range still gives max_backoff."""
    assert backoff_seconds(10_000, 1.0, 600.0, middle) == 600.0


def test_min_above_max_is_min() -> None:
    """A policy whose minimum exceeds its maximum waits the minimum, not less."""
    assert backoff_seconds(1, 10.0, 5.0, lowest) == 10.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), (" 7 ", 7.0), ("0", 0.0), ("-3", 0.0), ("1.5", 1.5)],
)
def test_retry_after_in_seconds(value: str, expected: float) -> None:
    """Delta-seconds are read as seconds; negative means now."""
    assert parse_retry_after(value, NOW) == expected


def test_retry_after_as_http_date() -> None:
    """An HTTP-date is measured from now."""
    value = format_datetime(NOW + timedelta(minutes=2), usegmt=True)
    assert parse_retry_after(value, NOW) == 120.0


def test_retry_after_date_in_the_past_is_zero() -> None:
    """An HTTP-date already past means retry now."""
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NOW) == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "1e5", "nan", "Thu, 99 Foo 2015 xx GMT",
                                   "Mon, 1 Jan 3000000000 00:00:00 GMT",
                                   "Wed, 21 Oct 2015 07:28:00 +99999999999999999999"])
def test_retry_after_absent_or_invalid_is_none(value: str | None) -> None:
    """A missing or unreadable Retry-After is ignored, out-of-range dates too."""
    assert parse_retry_after(value, NOW) is None


def test_retry_after_is_honoured_past_max_backoff() -> None:
    """A server's Retry-After longer than max_backoff is obeyed."""
    assert next_attempt_delay(1, ENDPOINT, 300.0, middle) == 300.0


def test_retry_after_over_an_hour_is_clamped() -> None:
    """Retry-After is honoured for at most an hour."""
    assert next_attempt_delay(1, ENDPOINT, 86_400.0, middle) == MAX_RETRY_AFTER == 3600.0


def test_retry_after_below_min_backoff_waits_min_backoff() -> None:
    """A zero Retry-After still waits min_backoff, so a server cannot cause a hot loop."""
    assert next_attempt_delay(4, ENDPOINT, 0.0, middle) == 2.0


def test_without_retry_after_the_schedule_applies() -> None:
    """No Retry-After: the endpoint's exponential schedule with jitter."""
    assert next_attempt_delay(3, ENDPOINT, None, middle) == 8.0
    assert next_attempt_delay(30, ENDPOINT, None, highest) == 60.0


def test_the_default_options_retry_a_failing_delivery_for_more_than_a_day() -> None:
    """With the default options, the waits between the attempts before a delivery is
    dead-lettered add up to more than 24 hours nominally and with the shortest jitter
    (and to no more than two days with the longest), as the schedule's table says."""
    defaults = EndpointSpec(name="e", url="http://127.0.0.1:9/")
    waits = range(1, defaults.max_attempts)  # after each attempt but the last

    def total(rand: Callable[[], float]) -> float:
        return sum(backoff_seconds(n, defaults.min_backoff, defaults.max_backoff, rand)
                   for n in waits)

    day = 24 * 3600.0
    assert total(middle) >= day
    assert total(lowest) >= day
    assert total(highest) <= 2 * day
    assert round(total(middle) / 3600, 2) == 30.14  # docs/concepts.md's table
