"""Half-open database connections: a link that acknowledges everything and answers nothing.

What a proxy, a NAT or a pooler whose own server connection died looks like
from the dispatcher: the kernel sees a healthy peer, so neither keepalives
nor tcp_user_timeout help, and only a deadline of our own notices. The test
cuts a real connection through the fault proxy and checks that a statement
on it gives up within its deadline and the next one works on a new
connection (the listener's own case is in ``test_listener.py``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from dispatcher.db import Database, DatabaseDown, Health
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
