"""The completer on its own: results written in batches, guarded, and kept through an outage."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg

import outbox
from dispatcher.completer import Completer
from dispatcher.db import Database, Health
from dispatcher.leases import Leases
from dispatcher.policy.model import Record
from tests.support.claiming import ENDPOINT, ID, TOKEN, claim
from tests.support.dispatcher import add_endpoint
from tests.support.proxy import FaultProxy


def claimed(conn: psycopg.Connection[Any], count: int) -> list[tuple[Any, ...]]:
    """``count`` events published to one endpoint and claimed by hand."""
    endpoint = add_endpoint(conn, "e", "http://127.0.0.1/")
    outbox.publish_many(conn, [outbox.Event("t", {"n": n}) for n in range(count)])
    conn.commit()
    return claim(conn, [endpoint], rows=count, requests=count)


def states(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute("SELECT state, count(*) FROM outbox.deliveries GROUP BY 1").fetchall()
    conn.commit()
    return {str(s): int(n) for s, n in rows}


async def write(completer: Completer, records: list[Record], timeout: float = 20.0) -> None:
    """Hand ``records`` to a running completer and wait until it has written them."""
    task = asyncio.create_task(completer.run())
    target = completer.written + len(records)
    for record in records:
        completer.add(record)
    async with asyncio.timeout(timeout):
        while completer.written < target:
            await asyncio.sleep(0.02)
    completer.close()
    await task


def test_results_are_written_and_their_leases_dropped(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Delivered results reach the table; the leases held for them are let go; wake is called."""
    rows = claimed(conn, 5)
    woken: list[bool] = []

    async def scenario() -> int:
        leases = Leases(30, lambda: 0.0)
        completer = Completer(Database(dsn, Health(), "complete"), leases,
                              lambda: woken.append(True), asyncio.Event())
        await write(completer, [Record(r[ID], r[TOKEN], "delivered") for r in rows])
        return len(leases)

    assert asyncio.run(scenario()) == 0
    assert states(conn) == {"delivered": 5}
    assert woken


def test_a_late_result_changes_nothing(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A result whose lease token is no longer the delivery's is discarded by the guard."""
    [row] = claimed(conn, 1)

    async def scenario() -> None:
        completer = Completer(Database(dsn, Health(), "complete"), Leases(30, lambda: 0.0),
                              lambda: None, asyncio.Event())
        await write(completer, [Record(row[ID], uuid.uuid4(), "delivered")])

    asyncio.run(scenario())
    assert states(conn) == {"in_flight": 1}


def test_results_wait_through_an_outage_and_are_written_after_it(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """While the database cannot be reached, results stay queued; once it is back, written."""
    rows = claimed(conn, 3)
    port = int(conn.info.port)

    async def scenario(proxy: FaultProxy) -> None:
        proxy.refuse = True
        completer = Completer(Database(proxy.dsn(dsn), Health(), "complete"),
                              Leases(30, lambda: 0.0), lambda: None, asyncio.Event())
        task = asyncio.create_task(completer.run())
        for r in rows:
            completer.add(Record(r[ID], r[TOKEN], "delivered"))
        await asyncio.sleep(1.0)
        assert completer.written == 0
        assert completer.pending() == 3
        proxy.heal()
        async with asyncio.timeout(20):
            while completer.written < 3:
                await asyncio.sleep(0.05)
        completer.close()
        await task

    with FaultProxy(port) as proxy:
        asyncio.run(scenario(proxy))
    assert states(conn) == {"delivered": 3}


def test_a_pause_for_410_is_written_with_the_results(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """The completer writes an endpoint's 410 pause beside the results: the one writer."""
    [row] = claimed(conn, 1)
    _gone(dsn, row)
    paused = conn.execute("SELECT enabled, disabled_reason, disabled_by "
                          "FROM outbox.endpoints").fetchone()
    assert paused == (False, "410 Gone at 2026-12-01T00:00:00+00:00", "gone")
    assert states(conn) == {"dead": 1}


def test_a_410_after_a_disable_keeps_who_disabled_it_and_how(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A request in flight answered 410 after an operator's disable --drop leaves the endpoint
    as the operator left it: disabled by the operator, dropping."""
    [row] = claimed(conn, 1)
    conn.execute("UPDATE outbox.endpoints SET enabled = false, disabled_by = 'operator', "
                 "disabled_reason = 'disabled by an operator', dropping = true")
    conn.commit()
    _gone(dsn, row)
    paused = conn.execute("SELECT enabled, disabled_reason, disabled_by, dropping "
                          "FROM outbox.endpoints").fetchone()
    assert paused == (False, "disabled by an operator", "operator", True)


def _gone(dsn: str, row: tuple[Any, ...]) -> None:
    """The completer records the claimed row dead on a 410, and the endpoint's pause."""
    async def scenario() -> None:
        completer = Completer(Database(dsn, Health(), "complete"), Leases(30, lambda: 0.0),
                              lambda: None, asyncio.Event())
        completer.disable(row[ENDPOINT], "410 Gone at 2026-12-01T00:00:00+00:00")
        await write(completer, [Record(row[ID], row[TOKEN], "dead", status=410)])

    asyncio.run(scenario())
