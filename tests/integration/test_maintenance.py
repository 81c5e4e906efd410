"""Maintenance on its own: the fleet's upkeep by one holder at a time, leases kept and rescued."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg

import outbox
from dispatcher.config import DispatcherConfig
from dispatcher.control import Control, Heartbeat
from dispatcher.db import Database, Health
from dispatcher.endpoint_view import EndpointView
from dispatcher.leases import Leases
from dispatcher.maintenance import Maintenance
from dispatcher.observe.metrics import Metrics
from dispatcher.policy.model import Delivery, EventData
from tests.support.claiming import ENDPOINT, EVENT, ID, TOKEN, claim
from tests.support.dispatcher import add_endpoint


def maintenance(dsn: str, *, lease: float = 30.0) -> tuple[Maintenance, Control, Leases,
                                                            Database]:
    config = DispatcherConfig(dsn=dsn, lease=lease)
    control = Control(Heartbeat())
    view = EndpointView({})
    leases = Leases(lease, view.longest_timeout)
    db = Database(dsn, Health(), "maintenance")
    return (Maintenance(config, db=db, endpoints=view, metrics=Metrics(), leases=leases,
                        wake=control.wake.set, endpoints_changed=control.endpoints_changed),
            control, leases, db)


def lease_left(conn: psycopg.Connection[Any]) -> float:
    row = conn.execute("SELECT extract(epoch FROM min(lease_expires_at) - now())::float8 "
                       "FROM outbox.deliveries WHERE state = 'in_flight'").fetchone()
    conn.commit()
    assert row is not None
    return float(row[0])


def test_one_dispatcher_at_a_time_holds_the_fleets_upkeep(dsn: str) -> None:
    """Of two contenders one is the maintainer; once it resigns, the other takes over."""
    async def scenario() -> tuple[bool, bool, bool]:
        (first, _, _, db1), (second, _, _, db2) = maintenance(dsn), maintenance(dsn)
        try:
            await first.contend()
            await second.contend()
            both = first.maintainer and not second.maintainer
            await first.resign()
            await second.contend()
            return both, first.maintainer, second.maintainer
        finally:
            await db1.close()
            await db2.close()

    assert asyncio.run(scenario()) == (True, False, True)


def test_held_leases_are_extended_and_expired_ones_rescued(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """extend_leases pushes a held delivery's expiry out; rescue brings back an expired one."""
    endpoint = add_endpoint(conn, "e", "http://127.0.0.1/")
    outbox.publish_many(conn, [outbox.Event("t", {"n": n}) for n in range(2)])
    conn.commit()
    held, dropped = claim(conn, [endpoint], rows=2, requests=2, lease_seconds=1)

    async def scenario() -> tuple[float, list[int], bool]:
        upkeep, control, leases, db = maintenance(dsn)
        try:
            event = EventData(id=held[EVENT], type="t", key=None, payload="{}", headers={},
                              created_at=datetime.now(UTC))
            leases.hold(Delivery(id=held[ID], endpoint_id=held[ENDPOINT], event=event,
                                 attempts=1, lease_token=held[TOKEN]))
            await upkeep.extend_leases()  # the held one: a lease of at least --lease again
            await asyncio.sleep(1.2)  # the other one's 1 s lease runs out
            control.wake.clear()
            await upkeep.rescue()
            return lease_left(conn), [dropped[ID]], control.wake.is_set()
        finally:
            await db.close()

    left, rescued, woken = asyncio.run(scenario())
    assert left > 20
    state = conn.execute("SELECT state FROM outbox.deliveries WHERE id = %s",
                         (rescued[0],)).fetchone()
    assert state == ("pending",)
    assert woken
