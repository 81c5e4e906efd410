"""A short-lived cache for the overview's counts (and the tenants' list), so the pages stay
fast at millions of rows.

Counting ten million finished deliveries takes the database a second or
more, however it is indexed; an overview that counted on every request
would be slow for every operator, and a dozen of them refreshing would be a
load of their own. :class:`Snapshot` keeps the last answer and serves it
while it is fresh; once stale it still serves it (the page says how old it
is) and computes the next one in a thread behind the page, one at a time;
only an answer older than ``stale`` seconds, or none yet, makes a request
wait. How long an answer stays fresh grows with what it cost: at least
``fresh`` seconds, and ten times its computation, so that the counting
never takes more than a tenth of the database's time for this view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("outbox.web")


@dataclass(frozen=True)
class _Answer(Generic[T]):
    value: T
    at: float
    """When its computation started (the clock's reading): what its age counts from."""
    took: float


class Snapshot(Generic[T]):
    """The last answer of ``compute``, with its age in seconds."""

    def __init__(self, compute: Callable[[], T], *, fresh: float = 5.0, stale: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 what: str = "the overview's counts") -> None:
        self._compute = compute
        self._what = what
        self._fresh = fresh
        self._stale = stale
        self._clock = clock
        self._answer: _Answer[T] | None = None
        self._running = False
        self._changed = threading.Condition()

    def get(self) -> tuple[T, float]:
        """The answer and its age: the cached one while it may serve, else a new one."""
        with self._changed:
            while True:
                answer = self._answer
                if answer is not None:
                    age = self._clock() - answer.at
                    if age < max(self._fresh, 10 * answer.took):
                        return answer.value, age
                    if age < self._stale:
                        self._behind()
                        return answer.value, age
                if not self._running:
                    self._running = True
                    break
                self._changed.wait()
        fresh = self._run()
        return fresh.value, self._clock() - fresh.at

    @property
    def running(self) -> bool:
        """Whether an answer is being computed now (for a request, or behind a page)."""
        return self._running

    def warm(self) -> None:
        """Start a computation behind the page now (at start-up: the first visitor's)."""
        with self._changed:
            self._behind()

    def _behind(self) -> None:
        """A computation in a thread of its own, unless one runs (lock held)."""
        if self._running:
            return
        self._running = True
        threading.Thread(target=self._quietly, name="outbox-web-counts", daemon=True).start()

    def _quietly(self) -> None:
        try:
            self._run()
        except Exception:  # the next request retries, and shows the error if it must
            log.exception("refreshing %s failed", self._what)

    def _run(self) -> _Answer[T]:
        """Compute, keep and hand out one answer; whoever waits is woken either way."""
        started = self._clock()
        try:
            value = self._compute()
        except BaseException:
            with self._changed:
                self._running = False
                self._changed.notify_all()
            raise
        answer = _Answer(value, started, self._clock() - started)
        with self._changed:
            self._answer = answer
            self._running = False
            self._changed.notify_all()
        return answer
