"""What the demo says of the circuit and of what it waits for (outbox.demo.watch)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from outbox.demo.watch import MARGIN_SECONDS, Watch


class _Conn:
    """Answers the demo's one watch query with the rows given, one per poll."""

    def __init__(self, *rows: tuple[Any, ...]) -> None:
        self.rows = list(rows)

    def execute(self, _query: object) -> _Conn:
        return self

    def fetchone(self) -> tuple[Any, ...]:
        return self.rows.pop(0)


OPENED = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_each_opening_is_said_once_and_counted() -> None:
    """The circuit's opening is news once (with its failures and the probe's time); a second
    opening (a failed probe: a new opened_at) counts again."""
    watch = Watch()
    conn = _Conn(("closed", None, 0, None, 30.0, None),
                 ("open", OPENED, 10, 29.6, 30.0, 0.5),
                 ("open", OPENED, 12, 20.0, 30.0, None),
                 ("open", OPENED + timedelta(seconds=31), 1, 30.0, 30.0, None))
    watch.poll(conn)  # type: ignore[arg-type]
    assert (watch.openings, watch.news) == (0, None)
    watch.poll(conn)  # type: ignore[arg-type]
    assert watch.news == "circuit open after 10 failures; probing in 30 s"
    watch.news = None
    watch.poll(conn)  # type: ignore[arg-type]
    assert (watch.openings, watch.news) == (1, None)
    assert watch.waiting_for() == "waiting for the circuit's cool-down: probing in 20 s"
    watch.poll(conn)  # type: ignore[arg-type]
    assert (watch.openings, watch.streak) == (2, 2)  # no arrival between: the runner resets it


def test_it_says_what_it_waits_for_and_how_long_it_waits() -> None:
    """A retry due later, the probe of a half-open circuit; patience is the cool-down, the
    retry awaited and a margin."""
    watch = Watch()
    watch.poll(_Conn(("closed", None, 0, None, 30.0, 7.2)))  # type: ignore[arg-type]
    assert watch.waiting_for() == "waiting for a retry due in 7 s"
    assert watch.patience() == 30.0 + 7.2 + MARGIN_SECONDS
    watch.poll(_Conn(("half-open", OPENED, 3, -1.0, 30.0, None)))  # type: ignore[arg-type]
    assert watch.waiting_for() == "waiting for the circuit's probe"
    assert watch.patience() == 30.0 + MARGIN_SECONDS
