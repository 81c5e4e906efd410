"""Retry timing over generated attempts, policies, Retry-After values and random draws.

The documented rule (docs/concepts.md, "Retries, dead letters and limits"): without
``Retry-After`` attempt n waits ``min_backoff x 2^(n-1)`` +-20 %, kept
between ``--min-backoff`` and ``--max-backoff``; a ``Retry-After`` (seconds
or an HTTP date) is obeyed between ``--min-backoff`` and one hour, past
``--max-backoff`` too. So every delay lies in [min_backoff,
max(max_backoff, honoured Retry-After capped at an hour)], finite, whatever
a receiver sends: the header is untrusted input.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.policy.backoff import (
    JITTER,
    MAX_RETRY_AFTER,
    next_attempt_delay,
    parse_retry_after,
)
from dispatcher.policy.model import AttemptResult, Delivery, Endpoint, EventData
from dispatcher.policy.outcome import decide
from outbox.endpoints._options import MAX_BACKOFF

# Pure and fast: many examples cost well under a second each.
PURE = settings(max_examples=300, deadline=None)

ATTEMPTS = st.one_of(st.integers(-3, 40), st.integers(41, 10**6), st.integers(10**6, 10**30))
# A uniform draw in [0, 1), as random.random gives.
DRAWS = st.floats(0.0, 1.0, exclude_max=True)
NOWS = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2200, 1, 1),
                    timezones=st.just(UTC))

_SECONDS = st.floats(0.0, MAX_BACKOFF, allow_nan=False)


@st.composite
def policies(draw: st.DrawFn) -> Endpoint:
    """Backoff settings as EndpointSpec accepts them: 0 <= min <= max <= a day, max > 0."""
    low, high = sorted((draw(_SECONDS), draw(_SECONDS)))
    if high == 0.0:
        high = draw(st.floats(1e-6, MAX_BACKOFF))
    return Endpoint(id=1, name="e", url="http://127.0.0.1:9/", min_backoff=low,
                    max_backoff=high)


def _mostly(valid: st.SearchStrategy[str], odd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """One field of a date: usually well formed, so that the odd fields meet a valid rest."""
    return st.one_of(valid, valid, valid, odd)


_NUMBERS = st.one_of(st.integers(-10, 10**12).map(str),
                     st.from_regex(r"[0-9]{1,40}", fullmatch=True))


@st.composite
def http_dates(draw: st.DrawFn) -> str:
    """HTTP dates as servers send them, and near misses: odd zones, days, years, fields."""
    if draw(st.booleans()):
        zone = draw(st.sampled_from([UTC, timezone(timedelta(hours=-5)),
                                     timezone(timedelta(hours=14))]))
        when = draw(st.datetimes(timezones=st.just(zone)))
        return format_datetime(when, usegmt=zone is UTC)
    parts = [
        _mostly(st.sampled_from(["Mon,", "Wed,", "Sun,"]), st.sampled_from(["Xyz,", "", ","])),
        _mostly(st.integers(1, 31).map(str), _NUMBERS),
        _mostly(st.sampled_from(["Jan", "Oct", "Dec"]), st.sampled_from(["Foo", "", "13"])),
        _mostly(st.integers(1900, 2200).map(str), _NUMBERS),
        _mostly(st.sampled_from(["07:28:00", "23:59:59"]),
                st.sampled_from(["23:59:60", "99:99:99", "7:28", "", "1:2:3:4"])),
        _mostly(st.sampled_from(["GMT", "UTC", "-0000", "+0000", "EST", "Z", ""]),
                st.one_of(st.integers(-10**30, 10**30).map(lambda n: f"{n:+05d}"),
                          st.text(max_size=8))),
    ]
    return " ".join(draw(part) for part in parts).strip()


# Dates are drawn twice as often as the rest: they have the most ways to go wrong.
RETRY_AFTER = st.one_of(
    st.none(),
    st.integers(-10**6, 10**12).map(str),
    st.from_regex(r"[+-]?[0-9]{1,400}(\.[0-9]{0,20})?", fullmatch=True),
    st.floats().map(repr),
    http_dates(),
    http_dates(),
    st.text(max_size=40),
)


def _bounds(endpoint: Endpoint, honoured: float | None) -> tuple[float, float]:
    """[min_backoff, max(max_backoff, Retry-After capped at an hour)]."""
    high = endpoint.max_backoff
    if honoured is not None:
        high = max(high, min(honoured, MAX_RETRY_AFTER))
    return endpoint.min_backoff, high


@PURE
@given(attempt=ATTEMPTS, endpoint=policies(), header=RETRY_AFTER, now=NOWS, draw=DRAWS)
def test_delay_stays_within_the_bounds(attempt: int, endpoint: Endpoint, header: str | None,
                                       now: datetime, draw: float) -> None:
    """Any attempt, policy, Retry-After and draw: a finite delay within the documented bounds."""
    honoured = parse_retry_after(header, now)
    assert honoured is None or (math.isfinite(honoured) and honoured >= 0)
    delay = next_attempt_delay(attempt, endpoint, honoured, lambda: draw)
    low, high = _bounds(endpoint, honoured)
    assert math.isfinite(delay)
    assert 0 <= low <= delay <= high


@PURE
@given(attempt=ATTEMPTS, endpoint=policies(), honoured=st.floats(0, 10**9), draw=DRAWS)
def test_a_retry_after_is_obeyed_between_min_backoff_and_an_hour(
        attempt: int, endpoint: Endpoint, honoured: float, draw: float) -> None:
    """A Retry-After is taken as it is, raised to min_backoff, cut to an hour; no jitter."""
    delay = next_attempt_delay(attempt, endpoint, honoured, lambda: draw)
    assert delay == max(min(honoured, MAX_RETRY_AFTER), endpoint.min_backoff)


@PURE
@given(attempt=ATTEMPTS, endpoint=policies(), draw=DRAWS)
def test_without_retry_after_the_schedule_is_jittered_by_twenty_percent(
        attempt: int, endpoint: Endpoint, draw: float) -> None:
    """min_backoff x 2^(n-1), capped, moved by at most 20 %, then kept within the policy."""
    delay = next_attempt_delay(attempt, endpoint, None, lambda: draw)
    exponent = min(max(attempt - 1, 0), 62)
    base = min(endpoint.min_backoff * 2.0**exponent, endpoint.max_backoff)
    low = max(base * (1 - JITTER), endpoint.min_backoff)
    high = min(base * (1 + JITTER), endpoint.max_backoff)
    assert low * (1 - 1e-12) <= delay <= high * (1 + 1e-12)


_RETRYABLE = st.one_of(
    st.builds(AttemptResult, status=st.sampled_from([408, 425, 429, 500, 502, 503, 599]),
              headers=st.fixed_dictionaries({}, optional={"retry-after": st.text()})),
    st.builds(AttemptResult, status=st.sampled_from([429, 503]),
              headers=st.fixed_dictionaries({"retry-after": RETRY_AFTER.filter(
                  lambda v: v is not None)})),
    st.builds(AttemptResult, error_kind=st.sampled_from(["timeout", "connect", "other"])),
)


@PURE
@given(result=_RETRYABLE, endpoint=policies(), attempts=st.integers(1, 99),
       probe=st.booleans(), now=NOWS, draw=DRAWS)
def test_a_retried_delivery_is_scheduled_within_the_bounds(
        result: AttemptResult, endpoint: Endpoint, attempts: int, probe: bool,
        now: datetime, draw: float) -> None:
    """Whatever a retryable answer says, the record written waits within the bounds."""
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload="{}", headers={},
                      created_at=now)
    delivery = Delivery(id=1, endpoint_id=1, event=event, attempts=attempts,
                        lease_token=uuid.uuid4(), probe=probe)
    policy = Endpoint(id=1, name="e", url="http://127.0.0.1:9/", max_attempts=100,
                      min_backoff=endpoint.min_backoff, max_backoff=endpoint.max_backoff)
    decision = decide(delivery, policy, result, now, lambda: draw)
    assert decision.record.state == "pending"
    assert decision.record.refund is probe
    honoured = parse_retry_after(result.headers.get("retry-after"), now)
    low, high = _bounds(policy, honoured)
    assert low <= decision.record.delay <= high
