"""The attempts' deadlines: one timer for all the requests in flight, not one each.

``asyncio.timeout`` makes a context object and a timer handle per request,
pushes the handle on the loop's heap and cancels it when the answer comes:
about 7 % of the dispatcher's CPU at full load (BENCHMARKS.md, "The hot
path, round 2"), for a timer that almost never fires. Here a request enters
its task and deadline in a dict, and leaves it when it ends; one timer, set
for the earliest deadline it knows of, looks over the requests in flight
when it fires, cancels those past their deadline, and sets itself for the
next. A request whose deadline is later than the timer's moment sets
nothing, so under load the timer fires about once per timeout, and each time
looks at the requests then in flight.

A cancelled request is told from a cancellation of its own (a graceful
stop) as ``asyncio.timeout`` tells them apart: the deadline passed, and the
task's count of cancellations requested is back where it was when the
request began once this one is taken back (``Task.uncancel``).
"""

from __future__ import annotations

import asyncio
import math


class Deadline:
    """One request's deadline, as :class:`Deadlines` keeps it."""

    __slots__ = ("at", "cancelling", "expired", "task")

    def __init__(self, at: float, task: asyncio.Task[object], cancelling: int) -> None:
        self.at = at
        self.task = task
        self.cancelling = cancelling
        self.expired = False

    def timed_out(self) -> bool:
        """After a ``CancelledError``: whether it came from this deadline (taken back, the
        caller reports a timeout) rather than from anyone else (the caller re-raises)."""
        return self.expired and self.task.uncancel() <= self.cancelling


class Deadlines:
    """The deadlines of the requests in flight, and the one timer that enforces them."""

    def __init__(self) -> None:
        self._running: dict[asyncio.Task[object], Deadline] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    def start(self, seconds: float) -> Deadline:
        """The current task's request ends within ``seconds``, or is cancelled."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline needs a task")
        if loop is not self._loop:  # a new loop (tests): what the old one ran is gone
            self._running.clear()
            self._timer, self._timer_at, self._loop = None, math.inf, loop
        deadline = Deadline(loop.time() + seconds, task, task.cancelling())
        self._running[task] = deadline
        if deadline.at < self._timer_at:
            self._set(loop, deadline.at)
        return deadline

    def end(self, deadline: Deadline) -> None:
        """The request is over (answered, failed or cancelled)."""
        if self._running.get(deadline.task) is deadline:
            del self._running[deadline.task]

    def _set(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = loop.call_at(at, self._fire), at

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest = math.inf
        for task, deadline in list(self._running.items()):
            if deadline.at <= now:
                del self._running[task]
                deadline.expired = True
                task.cancel()
            elif deadline.at < earliest:
                earliest = deadline.at
        if earliest < math.inf:
            self._set(loop, earliest)
