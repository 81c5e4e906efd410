"""Failed attempts in the log: a WARNING each with what comes next, folded to one a second."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from dispatcher.observe.attempt_log import AttemptLog
from dispatcher.policy.model import Delivery, Endpoint, EventData
from dispatcher.policy.outcome import Outcome

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BILLING = Endpoint(id=1, name="billing", url="http://127.0.0.1:9/")
MAIL = Endpoint(id=2, name="mail", url="http://127.0.0.1:9/")
RETRY = Outcome(action="retry", reason="http_5xx", last_error="HTTP 500: boom", last_status=500)
DEAD = Outcome(action="dead", reason="timeout", last_error="timeout: no answer in 10 s")


def delivery(attempts: int = 3) -> Delivery:
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload="{}", headers={},
                      created_at=NOW)
    return Delivery(id=1, endpoint_id=1, event=event, attempts=attempts,
                    lease_token=uuid.uuid4())


class Scene:
    """An AttemptLog on a clock the test moves, its scheduled lines run by hand."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.now = 100.0
        self.pending: list[tuple[float, Callable[[], None]]] = []
        self.caplog = caplog
        self.log = AttemptLog(logging.getLogger("test.attempts"), self.schedule,
                              clock=lambda: self.now)

    def schedule(self, delay: float, then: Callable[[], None]) -> None:
        self.pending.append((self.now + delay, then))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [then for at, then in self.pending if at <= self.now]
        self.pending = [(at, then) for at, then in self.pending if at > self.now]
        for then in due:
            then()

    def lines(self) -> list[logging.LogRecord]:
        return [r for r in self.caplog.records if r.name == "test.attempts"]


def test_each_failed_attempt_says_its_event_status_reason_and_next_attempt(
        caplog: pytest.LogCaptureFixture) -> None:
    """A retry's line names the event, endpoint, attempt, status, reason, the receiver's
    answer and when it is tried again; a dead letter's says so, with no status when none."""
    scene = Scene(caplog)
    first = delivery(3)
    scene.log.failed(first, BILLING, RETRY, 4.0, NOW)
    last = delivery(10)
    scene.log.failed(last, MAIL, DEAD, None, NOW)
    retry, dead = scene.lines()
    assert retry.levelno == dead.levelno == logging.WARNING
    assert retry.getMessage() == (f"attempt 3 of event {first.event.id} to billing failed: "
                                  "HTTP 500: boom (status 500, reason http_5xx); next attempt "
                                  "in 4.0 s")
    assert retry.__dict__["next"] == "2026-12-01T12:00:04+00:00"
    assert (retry.__dict__["event_id"], retry.__dict__["attempt"],
            retry.__dict__["status"]) == (str(first.event.id), 3, 500)
    assert dead.getMessage() == (f"delivery of event {last.event.id} to mail dead-lettered "
                                 "after 10 attempts: timeout: no answer in 10 s (no status, "
                                 "reason timeout)")


def test_a_flood_of_failures_is_one_line_a_second_per_endpoint_saying_how_many(
        caplog: pytest.LogCaptureFixture) -> None:
    """500 failures of one endpoint in a second: the first line, then one at the second's
    end with the last of them and the count of the rest; dead letters each on a line of
    their own; another endpoint is not folded with it; once the flood ends, a failure is
    said alone."""
    scene = Scene(caplog)
    for n in range(500):
        scene.log.failed(delivery(), BILLING, DEAD if n % 100 == 0 else RETRY, 1.0, NOW)
        scene.advance(0.0019)  # 500 within 0.95 s
    scene.log.failed(delivery(), MAIL, RETRY, 1.0, NOW)
    assert len(scene.lines()) == 5 + 1 + 1  # 5 dead letters, billing's first retry, mail's
    scene.advance(0.1)  # billing's second is over
    lines = scene.lines()
    assert len(lines) == 8
    assert lines[7].getMessage().endswith(
        "(and 493 more failed attempts to billing in the last 1 s, folded into this line)")
    assert lines[7].__dict__["folded"] == 494
    scene.advance(5.0)
    scene.log.failed(delivery(), BILLING, RETRY, 1.0, NOW)
    assert len(scene.lines()) == 9  # billing's new one, said at once
    assert "folded" not in scene.lines()[-1].getMessage()
