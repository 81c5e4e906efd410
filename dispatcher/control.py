"""The signals the parts of a running dispatcher give each other.

The parts (claimer, requests, completer, maintenance, listener) never call
into each other to say "look now" or "stop": they set one of these events,
and whoever waits on it acts. That keeps each part testable on its own and
the wiring in one place (``dispatcher.app``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Heartbeat:
    """A ready-made ``is_alive``: the dispatch loop calls :meth:`beat` on every turn.

    ``alive()`` is true while the last beat is at most ``timeout`` seconds old,
    so pick a timeout well above the longest wait of one turn (the poll
    interval, a reconnect backoff). It starts alive.
    """

    def __init__(self, timeout: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout = timeout
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        self._last = self._clock()

    def alive(self) -> bool:
        return self._clock() - self._last <= self._timeout


@dataclass(slots=True)
class Control:
    """Events shared by the parts, and the dispatch loop's heartbeat for ``/healthz``."""

    heartbeat: Heartbeat
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Stop claiming (first SIGTERM or SIGINT); requests in flight get their grace."""
    give_up: asyncio.Event = field(default_factory=asyncio.Event)
    """Stop waiting for the database and exit now (a second signal, or the grace is over)."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Something may be due: a commit was notified, a request ended, a retry came due."""
    endpoints_changed: asyncio.Event = field(default_factory=asyncio.Event)
    """An endpoint command committed: reload the endpoints now."""

    def stop(self) -> None:
        """The first call starts a graceful stop; the next one abandons the grace."""
        if self.stopping.is_set():
            self.give_up.set()
        self.stopping.set()
        self.wake.set()
