"""LISTEN/NOTIFY on a dedicated connection: a wake-up hint, never the source of truth.

The claim query decides what is due; a notification only says "look now"
instead of at the next poll. Listener connections can die silently (a
half-open TCP connection delivers nothing and raises nothing), so between
notifications the listener probes its own session with a round trip under a
deadline; a probe that fails or hangs replaces the connection, and so does
a connection that is not listening within ``setup_timeout`` of its start
(cut while it was set up: LISTEN unanswered for ever). While it is
down the dispatcher keeps delivering by polling, and after every reconnect
it wakes the claimer once, for whatever was committed in between.

LISTEN needs a session: through a transaction pooler (PgBouncer's
``pool_mode = transaction``) it lands on whichever server connection serves
it, and notifications never come back. So after each LISTEN the listener
sends itself a notification the way publishers do (through ``notify_dsn``,
the dispatcher's ``--dsn``) and waits for it. When it does not arrive, the
dispatcher says so once, at WARNING, naming ``--listen-dsn``, and delivers by
polling; the check is made again now and then, quietly, in case the
connection changes.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

import psycopg

from dispatcher.db import connect
from outbox._shared.text import first_line
from outbox.sql import queries

log = logging.getLogger("dispatcher.listener")

_PROBE_PREFIX = "probe:"


class Listener:
    def __init__(self, dsn: str, wake: Callable[[], None], *, probe_interval: float = 10.0,
                 probe_timeout: float = 5.0, notify_dsn: str | None = None,
                 direct: bool = False, round_trip_timeout: float = 5.0,
                 recheck_interval: float = 300.0, setup_timeout: float = 20.0,
                 endpoints_changed: Callable[[], None] = lambda: None) -> None:
        """``dsn`` is LISTENed on; ``notify_dsn`` (default ``dsn``) is where publishers
        notify; ``direct``: ``dsn`` was named by --listen-dsn."""
        self._dsn = dsn
        self._notify_dsn = notify_dsn if notify_dsn is not None else dsn
        self._direct = direct
        self._wake = wake
        self._endpoints_changed = endpoints_changed
        self._probe_interval = probe_interval
        self._probe_timeout = probe_timeout
        self._round_trip_timeout = round_trip_timeout
        self._recheck_interval = recheck_interval
        self._setup_timeout = setup_timeout
        self._warned = False
        self.connected = False
        self._unset: str | None = None  # why the last setup failed, as logged
        self.working: bool | None = None  # the last round trip's verdict; None: not yet

    async def run(self) -> None:
        """Listen until cancelled, reconnecting with capped backoff."""
        delay = 0.2
        while True:
            conn: psycopg.AsyncConnection[object] | None = None
            pause = delay
            setup = asyncio.timeout(self._setup_timeout)
            try:
                async with setup:
                    conn = await connect(self._dsn, "listener")
                    await conn.execute(queries["listen"])
                    works = await self._round_trip(conn)
                if works:
                    self.connected = True
                    self._unset = None
                    log.info("listening for notifications")
                    delay = 0.2
                    self._endpoints_changed()  # changes made while it was away
                    self._wake()
                    await self._listen(conn)
                else:  # polling it is; look again later
                    pause = self._recheck_interval
            except (psycopg.Error, OSError, TimeoutError) as exc:
                if self.connected:
                    log.warning("listener connection lost, polling meanwhile: %s",
                                first_line(exc))
                elif setup.expired():
                    log.warning("listener connection lost while it was set up (not listening "
                                "within %gs), polling meanwhile", self._setup_timeout)
                elif first_line(exc) != self._unset:  # each new reason once, not each retry
                    self._unset = first_line(exc)
                    log.warning("listener connection could not be set up, polling "
                                "meanwhile: %s", self._unset)
            finally:
                self.connected = False
                if conn is not None:
                    await _close_quietly(conn)
            await asyncio.sleep(pause)
            delay = min(delay * 2, 5.0)

    async def _round_trip(self, conn: psycopg.AsyncConnection[object]) -> bool:
        """Whether a notification sent through ``notify_dsn`` reaches this session."""
        payload = f"{_PROBE_PREFIX}{uuid.uuid4()}"
        async with await connect(self._notify_dsn, "notify probe") as sender:
            await sender.execute(queries["listen_probe"], {"payload": payload})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._round_trip_timeout
        while (left := deadline - loop.time()) > 0:
            async for notify in conn.notifies(timeout=left):
                if notify.payload == payload:
                    if self.working is False:
                        log.info("notifications arrive on the listener connection now")
                    self.working = True
                    return True
                if notify.channel == "outbox_endpoints":
                    self._endpoints_changed()
                self._wake()
        # Nothing came back: a pooler in between, or this very connection died while
        # it waited (a silent network cut). Only a session that still answers says
        # the former; a dead one is replaced like any other, at the usual pace.
        try:
            async with asyncio.timeout(self._probe_timeout):
                await conn.execute(queries["ping"])
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("listener connection lost while checking that notifications "
                        "arrive, polling meanwhile: %s", first_line(exc))
            raise
        self.working = False
        if not self._warned:
            self._warned = True
            hint = ("check the listener connection" if self._direct else
                    "--dsn may go through a transaction pooler: name a direct "
                    "connection with --listen-dsn (OUTBOX_LISTEN_DSN)")
            log.warning("LISTEN does not work: a notification sent to the database did not "
                        "come back within %.0fs (%s); delivering by polling meanwhile",
                        self._round_trip_timeout, hint)
        return False

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
