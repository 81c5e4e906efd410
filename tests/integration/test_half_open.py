"""Half-open database connections: a link that acknowledges everything and answers nothing.

What a proxy, a NAT or a pooler whose own server connection died looks like
from the dispatcher: the kernel sees a healthy peer, so neither keepalives
nor tcp_user_timeout help, and only a deadline of our own notices. Each test
cuts a real connection through the fault proxy and checks that the part
gives up on it within its deadline and works again on a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import psycopg
import pytest

from dispatcher.db import Database, DatabaseDown, Health, connect
from dispatcher.listener import Listener
from tests.support.proxy import FaultProxy


def test_a_statement_never_answered_is_an_outage_and_the_next_call_reconnects(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """fetch gives up after answer_timeout (plus psycopg's own cancel), says why, then heals."""
    async def scenario(proxy: FaultProxy) -> tuple[float, str, bool]:
        health = Health()
        db = Database(proxy.dsn(dsn), health, "claim", answer_timeout=1.0)
        await db.fetch("ping")
        assert health.db_ok
        assert proxy.blackhole(lambda link: True) == 1  # this link only: new ones work
        started = time.monotonic()
        with pytest.raises(DatabaseDown) as raised:
            await db.fetch("ping")
        took = time.monotonic() - started
        healthy_before = health.db_ok
        await db.fetch("ping")  # a new connection
        assert not healthy_before
        return took, str(raised.value), health.db_ok

    with FaultProxy(int(conn.info.port)) as proxy:
        took, why, healthy = asyncio.run(scenario(proxy))
        assert proxy.accepted >= 2
    assert why == "no answer from the database within 1s"
    assert took < 15, took  # 1 s, then at most psycopg's cancel (5 s) and its wait (5 s)
    assert healthy


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
        task = asyncio.create_task(listener.run())
        try:
            async with asyncio.timeout(20):
                while proxy.accepted < 3:  # the probe connection, the cut one, and another
                    await asyncio.sleep(0.02)
                proxy.heal()
                while not listener.connected:
                    await asyncio.sleep(0.02)
            return proxy.accepted
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    with FaultProxy(int(conn.info.port)) as proxy:
        assert asyncio.run(scenario(proxy)) >= 4
    assert "listener connection lost while it was set up (not listening within 1s)" in caplog.text
