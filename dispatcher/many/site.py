"""One database served with pinned connections: the parts of ``dispatcher.app`` for its DSN.

A site is the single-database dispatcher less what the process shares (the
HTTP client, the metrics' registry, tracing, the health server, signals):
``app.build_site`` makes its parts and ``app.dispatch`` runs them, so one
database among many is served by the same code as a lone ``--dsn``. Stopping
it is the graceful stop of that code: no new claims, requests in flight
finish within ``--shutdown-grace`` or are handed back, results written; at
once (a database gone) when told to give up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from dispatcher.app import build_site, dispatch
from dispatcher.config import DispatcherConfig
from dispatcher.control import Control, Heartbeat
from dispatcher.db import Health
from dispatcher.http.sender import HttpSender
from dispatcher.observe.logs import DATABASE
from dispatcher.observe.metrics import Metrics
from dispatcher.observe.tracing import Tracing
from outbox._shared.databases import Database as Listed
from outbox._shared.text import first_line


class Site:
    """One database's parts, running in a task of their own until stopped."""

    def __init__(self, listed: Listed, config: DispatcherConfig, *, metrics: Metrics,
                 sender: HttpSender, tracing: Tracing | None) -> None:
        self.name = listed.name
        own = dataclasses.replace(config, dsn=listed.dsn, listen_dsn=listed.listen_dsn or "",
                                  databases="")
        self.parts = build_site(own, control=Control(Heartbeat(float("inf"))), metrics=metrics,
                                sender=sender, tracing=tracing, health=Health(quiet=True))
        self.started = time.monotonic()
        self.last_busy = self.started
        self.last_ready = self.started
        self.stopping_for: str | None = None  # why it was told to stop, once it was
        self._written = 0
        self._task: asyncio.Task[None] | None = None

    def start(self, on_done: Callable[[], None] = lambda: None) -> None:
        """Run until stopped; ``on_done`` is called once its connections are closed."""
        token = DATABASE.set(self.name)  # its tasks' log lines name it
        try:
            self._task = asyncio.create_task(self._run(), name=f"database {self.name}")
        finally:
            DATABASE.reset(token)
        self._task.add_done_callback(lambda _task: on_done())

    async def _run(self) -> None:
        try:
            await dispatch(self.parts, watch_loop=False)
        finally:
            await self.parts.maintenance.resign()
            for database in self.parts.databases:
                await database.close()

    def watch(self, now: float) -> None:
        """Note whether it worked since the last look (results written, requests out) and
        whether its database answered."""
        written = self.parts.completer.written
        if (written != self._written or not self.parts.flights.idle()
                or self.parts.completer.pending() or not self.parts.claimer.claims):
            self._written = written
            self.last_busy = now
        if self.parts.health.ready:
            self.last_ready = now

    def stop(self, why: str, *, now: bool = False) -> None:
        """Stop claiming and drain; ``now``: give up on what cannot be written (its
        database is gone)."""
        if self.stopping_for is None:
            self.stopping_for = why
        self.parts.control.stop()
        if now:
            self.parts.control.give_up.set()

    def give_up(self) -> None:
        self.parts.control.give_up.set()

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    def failure(self) -> str | None:
        """Why its task ended on its own, if it failed."""
        if self._task is None or not self._task.done() or self._task.cancelled():
            return None
        exc = self._task.exception()
        return None if exc is None else first_line(exc)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
