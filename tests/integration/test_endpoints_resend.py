"""replay, retry_dead and send_test from the application: what the commands do, in the
caller's transaction, and a test event for one endpoint alone (real PostgreSQL, the real
dispatcher for the test event's delivery)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import outbox
from outbox import admin, endpoints
from outbox.testing import Receiver
from tests.integration.test_endpoints_tenant_guard import everything
from tests.support.dispatcher import run_once

Conn = psycopg.Connection[Any]


@pytest.fixture
def events(conn: Conn) -> list[uuid.UUID]:
    """Two endpoints of every event, four events (two of acme, one of globex, one without a
    tenant), every delivery dead; committed."""
    endpoints.add(conn, "hook", url="https://hooks.example/")
    endpoints.add(conn, "other", url="https://other.example/")
    ids = [outbox.publish(conn, "order.placed", {"n": 1}, tenant="acme"),
           outbox.publish(conn, "order.paid", {"n": 2}, tenant="acme"),
           outbox.publish(conn, "order.placed", {"n": 3}, tenant="globex"),
           outbox.publish(conn, "mail.sent", {"n": 4})]
    conn.execute("UPDATE outbox.deliveries SET state = 'dead', finished_at = now(), "
                 "attempts = 2")
    conn.commit()
    return ids


@pytest.mark.parametrize(("kwargs", "count"), [
    ({"since": timedelta(hours=1)}, 4),
    ({"since": datetime.now(UTC) - timedelta(hours=1), "until": timedelta(0)}, 4),
    ({"since": timedelta(hours=1), "types": ["order.*"]}, 3),
    ({"since": timedelta(hours=1), "tenant": "acme"}, 2),
    ({"event_ids": "first two"}, 2),
    ({"since": timedelta(hours=1), "dry_run": True}, 4),
])
def test_replay_does_what_outbox_replay_does(conn: Conn, events: list[uuid.UUID],
                                            kwargs: dict[str, Any], count: int) -> None:
    """replay() makes the deliveries outbox.admin.replay (the command's) makes, returns its
    number, in the caller's transaction: rolled back, nothing stays."""
    if kwargs.get("event_ids") == "first two":
        kwargs = {"event_ids": [str(events[0]), events[1]]}
    before = everything(conn)
    replayed = endpoints.replay(conn, "hook", **kwargs)
    made = everything(conn)
    conn.rollback()
    as_admin = {**kwargs, "types": kwargs.get("types", ())}
    if "event_ids" in as_admin:
        as_admin["event_ids"] = [uuid.UUID(str(i)) for i in as_admin["event_ids"]]
    conn.execute("SELECT 1")  # in a transaction: admin's is a savepoint of it, rolled back
    expected = admin.replay(conn, "hook", **as_admin).replayed
    conn.rollback()
    assert replayed == expected
    assert replayed == count
    assert len(made) - len(before) == (0 if kwargs.get("dry_run") else replayed)
    assert everything(conn) == before


def test_retry_dead_does_what_dead_retry_endpoint_does(conn: Conn,
                                                       events: list[uuid.UUID]) -> None:
    """retry_dead() puts the endpoint's dead letters back to pending (only those events',
    only that tenant's, when asked) and returns how many; the other endpoint's stay dead."""
    assert endpoints.retry_dead(conn, "hook", event_ids=[events[0]]) == 1
    assert endpoints.retry_dead(conn, "hook", tenant="globex") == 1
    assert endpoints.retry_dead(conn, "hook") == 2
    assert endpoints.retry_dead(conn, "hook") == 0
    states = conn.execute("SELECT e.name, d.state, count(*) FROM outbox.deliveries d JOIN "
                          "outbox.endpoints e ON e.id = d.endpoint_id GROUP BY 1, 2 "
                          "ORDER BY 1").fetchall()
    assert states == [("hook", "pending", 4), ("other", "dead", 4)]
    conn.rollback()
    assert admin.retry_dead(conn, endpoint="hook").retried == 4


def test_a_test_event_reaches_its_endpoint_alone(conn: Conn, dsn: str,
                                                 receiver: Receiver) -> None:
    """send_test publishes, in the caller's transaction, an event for that endpoint alone
    (its patterns aside: 'mail.*' takes no outbox.test), with the endpoint's tenant; the
    endpoints whose patterns take every event get nothing; the dispatcher sends it."""
    endpoints.add(conn, "customer", url=receiver.url, events=["mail.*"], tenant="acme",
                  max_attempts=1)
    endpoints.add(conn, "audit", url="https://audit.internal/", max_pending=10)
    endpoints.add(conn, "acme-all", url="https://all.acme.example/", tenant="acme")
    conn.commit()
    rolled = endpoints.send_test(conn, "customer")
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM outbox.events").fetchone() == (0,)
    event_id = endpoints.send_test(conn, "customer", type="webhook.ping", data={"hi": "there"})
    conn.commit()
    assert event_id != rolled
    assert conn.execute("SELECT e.name FROM outbox.deliveries d JOIN outbox.endpoints e "
                        "ON e.id = d.endpoint_id").fetchall() == [("customer",)]
    assert conn.execute("SELECT tenant, type FROM outbox.events").fetchall() == [
        ("acme", "webhook.ping")]
    assert conn.execute("SELECT sum(undelivered) FROM outbox.endpoint_backlog "
                        "WHERE endpoint_id = (SELECT id FROM outbox.endpoints "
                        "WHERE name = 'audit')").fetchone() == (0,)
    code, log = run_once(dsn)
    assert code == 0, log
    [request] = receiver.wait_for(1)
    body = json.loads(request.body)
    assert (body["id"], body["type"], body["tenant"], body["data"]) == (
        str(event_id), "webhook.ping", "acme", {"hi": "there"})


def test_the_async_twins(dsn: str, events: list[uuid.UUID]) -> None:
    """areplay, aretry_dead and asend_test do what their twins do."""
    async def scenario() -> tuple[int, int, uuid.UUID]:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            replayed = await endpoints.areplay(aconn, "hook", event_ids=[events[3]])
            retried = await endpoints.aretry_dead(aconn, "other", tenant="acme")
            sent = await endpoints.asend_test(aconn, "other")
            await aconn.commit()
            return replayed, retried, sent
    replayed, retried, sent = asyncio.run(scenario())
    assert (replayed, retried) == (1, 2)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM outbox.deliveries WHERE event_id = %s",
                            (sent,)).fetchone() == (1,)
