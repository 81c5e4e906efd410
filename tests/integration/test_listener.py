"""The listener on its own: a wake-up per notification, and a silent connection replaced
(while listening, while checking that notifications arrive, and before LISTEN is answered)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from dispatcher.db import connect
from dispatcher.listener import Listener
from tests.support.proxy import FaultProxy


async def _until(check: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def _running(listener: Listener) -> AsyncIterator[None]:
    """The listener's loop as a task for the block's length, cancelled after it."""
    task = asyncio.create_task(listener.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _notify(dsn: str, channel: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"NOTIFY {channel}")


def test_a_commit_notified_wakes_the_claimer_and_an_endpoint_change_reloads(dsn: str) -> None:
    """outbox_wakeup sets wake; outbox_endpoints sets endpoints_changed too."""
    async def scenario() -> tuple[int, int]:
        woken: list[int] = []
        changed: list[int] = []
        listener = Listener(dsn, lambda: woken.append(1),
                            endpoints_changed=lambda: changed.append(1))
        async with _running(listener):
            await _until(lambda: listener.connected)
            woken.clear()
            changed.clear()
            await asyncio.to_thread(_notify, dsn, "outbox_wakeup")
            await _until(lambda: woken)
            await asyncio.to_thread(_notify, dsn, "outbox_endpoints")
            await _until(lambda: changed)
            return len(woken), len(changed)

    woken, changed = asyncio.run(scenario())
    assert woken >= 2
    assert changed == 1


def test_a_connection_that_goes_silent_is_replaced(dsn: str, conn: psycopg.Connection[Any],
                                                   ) -> None:
    """A half-open listener connection fails its probe and is replaced; wake is set after."""
    async def scenario(proxy: FaultProxy) -> int:
        woken: list[int] = []
        listener = Listener(proxy.dsn(dsn), lambda: woken.append(1), probe_interval=0.3,
                            probe_timeout=0.5)
        async with _running(listener):
            await _until(lambda: listener.connected)
            proxy.blackhole()  # the link stays open and carries nothing
            await _until(lambda: not listener.connected)
            proxy.heal()
            woken.clear()
            await _until(lambda: listener.connected and woken)
            return proxy.accepted

    with FaultProxy(int(conn.info.port)) as proxy:
        accepted = asyncio.run(scenario(proxy))
    assert accepted >= 2


def test_a_connection_cut_during_its_notification_check_is_replaced_at_once(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Cut while it checks that notifications come back: a dead connection, not a pooler,
    so it is replaced at the usual pace instead of waiting for the pooler re-check."""
    async def scenario(listen: FaultProxy, notify: FaultProxy) -> int:
        listener = Listener(listen.dsn(dsn), lambda: None, notify_dsn=notify.dsn(dsn),
                            probe_interval=0.5, probe_timeout=0.5, round_trip_timeout=1.0,
                            recheck_interval=300)
        async with _running(listener):
            # The check's own notification is on its way: LISTEN is done, the wait begins.
            await _until(lambda: notify.accepted >= 1)
            listen.blackhole()  # the listening link, and new ones until healed
            await asyncio.sleep(2.0)
            listen.heal()
            await _until(lambda: listener.connected, timeout=15)
            return listen.accepted

    port = int(conn.info.port)
    with FaultProxy(port) as listen, FaultProxy(port) as notify:
        notify.latency = 0.2  # the check's notification takes a while: time to cut
        assert asyncio.run(scenario(listen, notify)) >= 2


def test_a_listener_cut_before_listen_is_answered_is_replaced(
        dsn: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture) -> None:
    """LISTEN sent on a link that then goes silent: replaced after setup_timeout, not never."""
    async def opening_bytes(proxy: FaultProxy) -> int:
        opened = await connect(proxy.dsn(dsn), "listener")
        await opened.close()
        return proxy.links[-1].from_target

    async def scenario(proxy: FaultProxy) -> int:
        proxy.stall_after = await opening_bytes(proxy)  # what connect() reads, then nothing
        listener = Listener(proxy.dsn(dsn), lambda: None, setup_timeout=1.0,
                            probe_timeout=0.5, round_trip_timeout=1.0)
        async with _running(listener):
            await _until(lambda: proxy.accepted >= 3)  # the probe one, the cut one, another
            proxy.heal()
            await _until(lambda: listener.connected)
            return proxy.accepted

    with FaultProxy(int(conn.info.port)) as proxy:
        assert asyncio.run(scenario(proxy)) >= 4
    assert "listener connection lost while it was set up (not listening within 1s)" in caplog.text
