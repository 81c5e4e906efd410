"""The schema gate: no dispatching against a schema older than this dispatcher needs.

A dispatcher may start before the migration job of its deploy has run (or
beside a database another team has not upgraded yet). Until the schema is
one it can work on, it claims nothing, ``/readyz`` answers 503, and the log
says why at once and then at most every 30 s: the version found, the version
needed and ``outbox migrate``. It starts by itself once the schema is
upgraded. A role that lacks a privilege the dispatcher uses is the same
kind of problem, checked first and all at once (retention's DELETEs too):
the line names each missing privilege and ``outbox grants``, where the
first statement needing one would have failed with a traceback. With
``--once`` (a cron or CI job) it gives up at once instead, as it does
when the server refuses it for good (a wrong password, a database or
role that does not exist): retrying cannot fix those.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from enum import Enum

from dispatcher.db import Database, DatabaseDown, DatabaseRefused, Health
from outbox._shared.schema import aread_with, outbox_problem

log = logging.getLogger("dispatcher.schema")
REPEAT_EVERY = 30.0
"""Seconds between two log lines about the same schema problem."""


class GateVerdict(Enum):
    READY = "ready"        # dispatch
    STOPPED = "stopped"    # told to stop while waiting: a clean exit
    FAILED = "failed"      # --once, and the database cannot be used as it is: exit 1


class SchemaGate:
    """Waits until ``db``'s schema is at version ``needed`` or newer."""

    def __init__(self, db: Database, health: Health, *, needed: int,
                 clock: Callable[[], float] = time.monotonic,
                 repeat_every: float = REPEAT_EVERY) -> None:
        self._db = db
        self._health = health
        self._needed = needed
        self._clock = clock
        self._repeat_every = repeat_every
        self._said: tuple[str, float] | None = None  # the last problem logged, and when

    async def problem(self) -> str | None:
        """What keeps us from dispatching here, or None; raises DatabaseDown."""
        role, missing = (await self._db.fetch("dispatcher_privileges"))[0]
        if missing:
            return (f"the role {role} lacks privileges the dispatcher needs: "
                    f"{', '.join(missing)}; as the schema's owner, run `outbox grants "
                    f"--dispatcher {role} --application APP_ROLE --apply`")
        return outbox_problem(await aread_with(self._db.fetch), self._needed)

    def _report(self, problem: str) -> None:
        now = self._clock()
        if (self._said is None or self._said[0] != problem
                or now - self._said[1] >= self._repeat_every):
            log.error("not dispatching: %s", problem)
            self._said = (problem, now)

    async def wait(self, stopping: asyncio.Event, *, once: bool, interval: float,
                   beat: Callable[[], None]) -> GateVerdict:
        """Check every ``interval`` seconds until the schema will do (or ``stopping``)."""
        while not stopping.is_set():
            beat()  # waiting is the loop alive: /healthz stays 200
            try:
                problem = await self.problem()
            except DatabaseRefused as exc:
                if once:
                    log.error("cannot use the database: %s", exc)
                    return GateVerdict.FAILED
            except DatabaseDown:
                pass  # an outage: Health has said so; wait it out
            else:
                if problem is None:
                    if self._said is not None:
                        log.info("the outbox schema is now one this dispatcher can use")
                    self._health.schema_ok = True
                    return GateVerdict.READY
                self._health.schema_ok = False
                self._report(problem)
                if once:
                    return GateVerdict.FAILED
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)
        return GateVerdict.STOPPED
