"""Failed attempts in the log: a WARNING line each, folded under a flood.

A receiver that fails is first seen here: before, the first sign of one
answering 500 was its dead letters, minutes or hours later. Each failed
attempt says its event, endpoint, attempt number, HTTP status (or none), the
failure reason (the label of ``outbox_delivery_failures_total``), what the
receiver answered (masked as ``last_error`` is) and what comes next: the
next attempt's time, or the dead letter.

An endpoint whose attempts fail faster than one a second (a receiver down
under a backlog fails hundreds a second) gets at most one retry line a
second: the first failure of a second is said in full, the others are
counted, and the line at the end of that second gives the last of them and
says how many more it stands for. A dead letter is always a line of its own:
each delivery dies once, and that line is the one operators search for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dispatcher.policy.model import Delivery, Endpoint
from dispatcher.policy.outcome import Outcome
from outbox._shared.text import counted

FOLD_SECONDS = 1.0
"""An endpoint's failed attempts get at most one line in this many seconds."""

Schedule = Callable[[float, Callable[[], None]], object]
"""Calls a function after a delay in seconds (the event loop's ``call_later``)."""


@dataclass
class _Folded:
    said_at: float  # when its last line was written, monotonic
    count: int = 0  # failures since then, not said
    flushing: bool = False  # a line for them is scheduled
    last: _Line | None = None  # the latest of them


def fields(delivery: Delivery, endpoint: Endpoint, status: int | None,
           reason: str | None) -> dict[str, object]:
    """The structured fields of a log line about one attempt (JSON logs carry them as keys),
    so that a search for an event id finds every line of its story."""
    return {"event_id": str(delivery.event.id), "endpoint": endpoint.name,
            "attempt": delivery.attempts, "status": status, "reason": reason}


class AttemptLog:
    """Says each failed attempt at WARNING, at most one line a second per endpoint."""

    def __init__(self, log: logging.Logger, schedule: Schedule, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``schedule`` runs the line that ends a folded second (``loop.call_later``)."""
        self._log = log
        self._schedule = schedule
        self._clock = clock
        # Per endpoint name that failed here: as many as the endpoints.
        self._folded: dict[str, _Folded] = {}

    def failed(self, delivery: Delivery, endpoint: Endpoint, outcome: Outcome,
               retry_in: float | None, now: datetime) -> None:
        """One failed attempt of ``delivery``: retried in ``retry_in`` seconds, or, with
        None, dead-lettered; ``now``: when it ended (UTC)."""
        line = _line(delivery, endpoint, outcome, retry_in, now)
        if outcome.action == "dead" or retry_in is None:
            # A dead letter is said on its own line, always: each delivery dies once,
            # and it is the line operators search for.
            self._log.warning(line.message, *line.args, extra=line.extra)
            return
        clock = self._clock()
        folded = self._folded.get(endpoint.name)
        if folded is None or clock - folded.said_at >= FOLD_SECONDS:
            self._folded[endpoint.name] = _Folded(said_at=clock)
            self._log.warning(line.message, *line.args, extra=line.extra)
            return
        folded.count += 1
        folded.last = line
        if not folded.flushing:
            folded.flushing = True
            self._schedule(folded.said_at + FOLD_SECONDS - clock,
                           lambda: self._flush(endpoint.name))

    def _flush(self, name: str) -> None:
        """The line that ends a folded second: the last failure, and how many more it
        stands for."""
        folded = self._folded.get(name)
        if folded is None or folded.last is None:
            return
        line, more = folded.last, folded.count - 1
        message = line.message
        args = line.args
        if more:
            message += " (and %s to %s in the last %g s, folded into this line)"
            args += (counted(more, "more failed attempt"), name, FOLD_SECONDS)
        self._log.warning(message, *args, extra={**line.extra, "folded": folded.count})
        self._folded[name] = _Folded(said_at=self._clock())


@dataclass(frozen=True)
class _Line:
    message: str
    args: tuple[object, ...]
    extra: dict[str, object]


def _line(delivery: Delivery, endpoint: Endpoint, outcome: Outcome, retry_in: float | None,
          now: datetime) -> _Line:
    """The WARNING line of one failed attempt."""
    status = f"status {outcome.last_status}" if outcome.last_status is not None \
        else "no status"
    extra = fields(delivery, endpoint, outcome.last_status, outcome.reason)
    if outcome.action == "dead" or retry_in is None:
        return _Line("delivery of event %s to %s dead-lettered after %s: %s (%s, reason %s)",
                     (delivery.event.id, endpoint.name, counted(delivery.attempts, "attempt"),
                      outcome.last_error, status, outcome.reason),
                     {**extra, "next": "dead-lettered"})
    at = (now + timedelta(seconds=retry_in)).astimezone(UTC).isoformat(timespec="seconds")
    return _Line("attempt %d of event %s to %s failed: %s (%s, reason %s); next attempt in %s",
                 (delivery.attempts, delivery.event.id, endpoint.name, outcome.last_error,
                  status, outcome.reason, _seconds(retry_in)),
                 {**extra, "next": at})


def _seconds(value: float) -> str:
    """A wait as people read it: 0.8 s, 4 s, 10 min, 1 h 2 min."""
    if value < 10:
        return f"{value:.1f} s"
    whole = round(value)
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
