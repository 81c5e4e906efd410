"""The listener on its own: a wake-up per notification, and a silent connection replaced."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg

from dispatcher.listener import Listener
from tests.support.proxy import FaultProxy


async def _until(check: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


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
        task = asyncio.create_task(listener.run())
        try:
            await _until(lambda: listener.connected)
            woken.clear()
            changed.clear()
            await asyncio.to_thread(_notify, dsn, "outbox_wakeup")
            await _until(lambda: woken)
            await asyncio.to_thread(_notify, dsn, "outbox_endpoints")
            await _until(lambda: changed)
            return len(woken), len(changed)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

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
        task = asyncio.create_task(listener.run())
        try:
            await _until(lambda: listener.connected)
            proxy.blackhole()  # the link stays open and carries nothing
            await _until(lambda: not listener.connected)
            proxy.heal()
            woken.clear()
            await _until(lambda: listener.connected and woken)
            return proxy.accepted
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

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
        task = asyncio.create_task(listener.run())
        try:
            # The check's own notification is on its way: LISTEN is done, the wait begins.
            await _until(lambda: notify.accepted >= 1)
            listen.blackhole()  # the listening link, and new ones until healed
            await asyncio.sleep(2.0)
            listen.heal()
            await _until(lambda: listener.connected, timeout=15)
            return listen.accepted
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    port = int(conn.info.port)
    with FaultProxy(port) as listen, FaultProxy(port) as notify:
        notify.latency = 0.2  # the check's notification takes a while: time to cut
        assert asyncio.run(scenario(listen, notify)) >= 2
