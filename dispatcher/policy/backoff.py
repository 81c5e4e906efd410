"""Retry timing as pure functions: attempt number and policy in, seconds out.

The clock and the randomness are parameters, so that tests pin them and never
sleep. The result is a delay; the caller adds it to the database clock and
stores ``next_attempt_at`` in the row, so the schedule survives restarts and
is shared by every dispatcher.

The schedule: ``min_backoff`` doubling with each failed attempt, capped at
``max_backoff``, with ±20 % jitter so that deliveries that failed together
(an endpoint outage) do not all come back in the same second. A server's
``Retry-After`` wins over the schedule, even past ``max_backoff``, but never
beyond an hour: a receiver cannot park a delivery for days.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from dispatcher.policy.model import Endpoint

MAX_RETRY_AFTER: Final = 3600.0
"""The longest ``Retry-After`` honoured, in seconds; longer values are cut to this."""

JITTER: Final = 0.2
"""Each delay is the exponential value times a random factor in [1 - JITTER, 1 + JITTER]."""

# Past 2**62 times min_backoff every delay is max_backoff anyway; capping the
# exponent keeps the arithmetic in floats for attempt numbers of any size.
_MAX_EXPONENT: Final = 62
# RFC 9110 delta-seconds is digits only; a sign or a fraction is tolerated
# (some servers send them) and read leniently.
_DELTA_SECONDS: Final = re.compile(r"[+-]?\d+(?:\.\d*)?")


def backoff_seconds(
    attempt: int, min_backoff: float, max_backoff: float, rand: Callable[[], float]
) -> float:
    """Delay after failed attempt number ``attempt`` (1 for the first).

    ``min_backoff * 2 ** (attempt - 1)`` with ±20 % jitter from ``rand()``
    (uniform in [0, 1), like ``random.random``), kept within
    [``min_backoff``, ``max_backoff``].
    """
    low = max(min_backoff, 0.0)
    high = max(max_backoff, low)
    exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
    base = min(low * 2.0**exponent, high)
    jittered = base * (1.0 - JITTER + 2.0 * JITTER * rand())
    return min(max(jittered, low), high)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or None when absent or invalid.

    Accepts delta-seconds (``"120"``) and an HTTP-date
    (``"Wed, 21 Oct 2015 07:28:00 GMT"``, measured from ``now``). A time in the
    past or a negative number means "now": 0.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _DELTA_SECONDS.fullmatch(text):
        seconds = float(text)
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        # OverflowError: a year or zone offset too large for datetime (a date
        # such as "Mon, 1 Jan 3000000000 00:00:00 GMT"): as unreadable as any.
        return None
    if when.tzinfo is None:  # "-0000" means UTC with no claim about local time
        when = when.replace(tzinfo=UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


def next_attempt_delay(
    attempt: int, endpoint: Endpoint, retry_after: float | None, rand: Callable[[], float]
) -> float:
    """Seconds until the next attempt after failed attempt number ``attempt``.

    The server's ``retry_after`` when it gave one (even past the endpoint's
    ``max_backoff``, at most an hour, at least ``min_backoff``); otherwise the
    endpoint's exponential schedule.
    """
    if retry_after is not None:
        return max(min(retry_after, MAX_RETRY_AFTER), endpoint.min_backoff)
    return backoff_seconds(attempt, endpoint.min_backoff, endpoint.max_backoff, rand)
