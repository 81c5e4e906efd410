"""What the demo waits for: the endpoint's circuit and the next retry, read from the database.

The demo's receiver fails on purpose, and on a busy machine many requests in
flight together may time out at once: the circuit breaker may open. That is
no failure of the demo but a moment to show the breaker, so the demo says
so ("circuit open after N failures; probing in 30 s"), counts the times it
opened (each distinct ``opened_at``), and when nothing has arrived for a
while says what it waits for: the circuit's cool-down, or a retry due at a
time. It gives up only when nothing has moved for longer than the
cool-down and the retry it waits for, and a margin (:meth:`Watch.patience`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from outbox.sql import queries

QUIET_SECONDS = 10.0
"""Progress that stood still this long says what it waits for."""
MARGIN_SECONDS = 30.0
"""Nothing moved for the cool-down, the retry awaited, and this long: the demo gives up."""
MAX_STREAK = 5
"""Openings of the circuit without an arrival between them that the demo waits out (each a
failed probe, then another cool-down)."""


@dataclass(slots=True)
class Watch:
    """The demo endpoint's circuit and retries, polled by the demo's loop."""

    circuit: str = "closed"
    opened_at: datetime | None = None
    openings: int = 0
    streak: int = 0  # openings since the last arrival (the demo's loop resets it)
    window_failures: int = 0
    probe_in: float | None = None  # seconds until the probe may go (open)
    cooldown: float = 30.0
    retry_in: float | None = None  # seconds until the next retry is due
    news: str | None = None  # the circuit just opened: said once

    def poll(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(queries["demo_watch"]).fetchone()
        if row is None:
            return
        circuit, opened_at, failures, probe_in, cooldown, retry_in = row
        if circuit != "closed" and opened_at is not None and opened_at != self.opened_at:
            self.openings += 1
            self.streak += 1
            self.opened_at = opened_at
            self.news = (f"circuit open after {failures} failures; probing in "
                         f"{max(0.0, float(probe_in or 0.0)):.0f} s")
        self.circuit, self.window_failures = circuit, int(failures)
        self.probe_in = None if probe_in is None else float(probe_in)
        self.cooldown = float(cooldown)
        self.retry_in = None if retry_in is None else float(retry_in)

    def waiting_for(self) -> str:
        """What the dispatcher waits for now, in words for the progress line."""
        if self.circuit == "open" and self.probe_in is not None:
            return (f"waiting for the circuit's cool-down: probing in "
                    f"{max(0.0, self.probe_in):.0f} s")
        if self.circuit == "half-open":
            return "waiting for the circuit's probe"
        if self.retry_in is not None and self.retry_in > 0:
            return f"waiting for a retry due in {self.retry_in:.0f} s"
        return "waiting for the receiver's answers"

    def patience(self) -> float:
        """Seconds without movement after which the demo gives up."""
        return self.cooldown + max(0.0, self.retry_in or 0.0) + MARGIN_SECONDS
