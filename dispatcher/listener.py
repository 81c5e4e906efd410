"""LISTEN/NOTIFY on a dedicated connection: a wake-up hint, never the source of truth.

The claim query decides what is due; a notification only says "look now"
instead of at the next poll. Listener connections can die silently (a
half-open TCP connection delivers nothing and raises nothing), so between
notifications the listener probes its own session with a round trip under a
deadline; a probe that fails or hangs replaces the connection. While it is
down the dispatcher keeps delivering by polling, and after every reconnect
it wakes the claimer once, for whatever was committed in between.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from dispatcher.db import connect
from outbox._shared.text import first_line
from outbox.sql import queries

log = logging.getLogger("dispatcher.listener")


class Listener:
    def __init__(self, dsn: str, wake: Callable[[], None], *, probe_interval: float = 10.0,
                 probe_timeout: float = 5.0,
                 endpoints_changed: Callable[[], None] = lambda: None) -> None:
        self._dsn = dsn
        self._wake = wake
        self._endpoints_changed = endpoints_changed
        self._probe_interval = probe_interval
        self._probe_timeout = probe_timeout
        self.connected = False

    async def run(self) -> None:
        """Listen until cancelled, reconnecting with capped backoff."""
        delay = 0.2
        while True:
            conn: psycopg.AsyncConnection[object] | None = None
            try:
                conn = await connect(self._dsn, "listener")
                await conn.execute(queries["listen"])
                self.connected = True
                delay = 0.2
                self._endpoints_changed()  # changes made while it was away
                self._wake()
                await self._listen(conn)
            except (psycopg.Error, OSError, TimeoutError) as exc:
                if self.connected:
                    log.warning("listener connection lost, polling meanwhile: %s",
                                first_line(exc))
            finally:
                self.connected = False
                if conn is not None:
                    await _close_quietly(conn)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _listen(self, conn: psycopg.AsyncConnection[object]) -> None:
        while True:
            async for notify in conn.notifies(timeout=self._probe_interval):
                if notify.channel == "outbox_endpoints":
                    self._endpoints_changed()
                self._wake()
            # Same-session heartbeat: proves this very connection still carries traffic.
            async with asyncio.timeout(self._probe_timeout):
                await conn.execute(queries["ping"])


async def _close_quietly(conn: psycopg.AsyncConnection[object]) -> None:
    try:
        async with asyncio.timeout(2):
            await conn.close()
    except (psycopg.Error, OSError, TimeoutError):
        pass
