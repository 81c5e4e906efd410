"""outbox.endpoints.retry_now: an endpoint's pending deliveries due now, an open circuit
half-open, in the caller's transaction (real PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import outbox
from outbox import endpoints

Conn = psycopg.Connection[Any]


def waiting(conn: Conn) -> dict[str, tuple[str, str]]:
    """Per event type: the delivery's state and when it is due ('now', 'later', 'parked')."""
    rows = conn.execute(
        "SELECT e.type, d.state, CASE WHEN d.next_attempt_at = 'infinity' THEN 'parked' "
        "WHEN d.next_attempt_at <= clock_timestamp() THEN 'now' ELSE 'later' END "
        "FROM outbox.deliveries d JOIN outbox.events e ON e.id = d.event_id").fetchall()
    conn.commit()
    return {str(t): (str(s), str(due)) for t, s, due in rows}


def circuit(conn: Conn, name: str) -> tuple[str, bool]:
    """The endpoint's circuit, and whether the claim reads it as due its probe."""
    row = conn.execute(
        "SELECT s.circuit, outbox.circuit_probe_due_v1(s.circuit, s.opened_at, "
        "e.breaker_cooldown_seconds, s.probe_until) "
        "FROM outbox.endpoint_state s JOIN outbox.endpoints e ON e.id = s.endpoint_id "
        "WHERE e.name = %s", (name,)).fetchone()
    conn.commit()
    assert row is not None
    return str(row[0]), bool(row[1])


@pytest.fixture
def backlog(conn: Conn) -> Conn:
    """Endpoint hook (circuit open, an hour of cool-down left) with deliveries of tenants
    acme and globex and of none waiting an hour; one parked behind its key, one in flight,
    one dead, one already due."""
    endpoints.add(conn, "hook", url="http://127.0.0.1:9/h", breaker_cooldown=3600,
                  events=["acme.*", "globex.*", "plain.*", "parked.*", "flight.*", "dead.*",
                          "due.*"])
    endpoints.add(conn, "other", url="http://127.0.0.1:9/o", events=["x.*"])
    for event_type, tenant in (("acme.1", "acme"), ("acme.2", "acme"), ("globex.1", "globex"),
                               ("plain.1", None), ("parked.1", "acme"), ("flight.1", "acme"),
                               ("dead.1", "acme"), ("due.1", "acme"), ("x.1", None)):
        outbox.publish(conn, event_type, {}, tenant=tenant)
    conn.execute("""
        UPDATE outbox.deliveries d SET
            next_attempt_at = CASE e.type WHEN 'parked.1' THEN 'infinity'
                                          WHEN 'due.1' THEN now() - interval '1 minute'
                                          ELSE now() + interval '1 hour' END,
            state = CASE e.type WHEN 'flight.1' THEN 'in_flight' WHEN 'dead.1' THEN 'dead'
                                ELSE 'pending' END,
            lease_token = CASE e.type WHEN 'flight.1' THEN gen_random_uuid() END,
            lease_expires_at = CASE e.type WHEN 'flight.1' THEN now() + interval '1 hour' END,
            finished_at = CASE e.type WHEN 'dead.1' THEN now() END
        FROM outbox.events e WHERE e.id = d.event_id""")
    conn.execute("UPDATE outbox.endpoint_state s SET circuit = 'open', opened_at = now() "
                 "FROM outbox.endpoints e WHERE e.id = s.endpoint_id AND e.name = 'hook'")
    conn.commit()
    return conn


def test_pending_deliveries_become_due_and_the_circuit_half_open(backlog: Conn) -> None:
    """retry_now makes due the pending deliveries waiting for later (not those parked behind
    their key, in flight, dead, or of another endpoint), returns how many, and puts the open
    circuit half-open with its probe due at once."""
    before = waiting(backlog)
    assert circuit(backlog, "hook") == ("open", False)
    assert endpoints.retry_now(backlog, "hook") == 4
    backlog.commit()
    after = waiting(backlog)
    assert {t for t in after if after[t] != before[t]} == {"acme.1", "acme.2", "globex.1",
                                                           "plain.1"}
    assert after["acme.1"] == ("pending", "now")
    assert (after["parked.1"], after["flight.1"], after["dead.1"], after["x.1"]) == (
        ("pending", "parked"), ("in_flight", "later"), ("dead", "later"),
        ("pending", "later"))
    assert circuit(backlog, "hook") == ("half-open", True)
    assert endpoints.retry_now(backlog, "hook") == 0  # nothing waits any more


def test_a_tenant_scopes_the_deliveries(backlog: Conn) -> None:
    """With tenant, only that tenant's pending deliveries are made due (and counted)."""
    assert endpoints.retry_now(backlog, "hook", tenant="acme") == 2
    backlog.commit()
    after = waiting(backlog)
    assert [t for t in ("acme.1", "acme.2", "globex.1", "plain.1")
            if after[t][1] == "now"] == ["acme.1", "acme.2"]
    assert endpoints.retry_now(backlog, "hook", tenant="initech") == 0


def test_a_rollback_leaves_nothing_and_the_notification_waits_for_commit(
        backlog: Conn, dsn: str) -> None:
    """retry_now never commits: rolled back, deliveries and circuit are as before and no
    dispatcher was woken; committed, outbox_wakeup is sent."""
    before = waiting(backlog)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN outbox_wakeup")
        assert endpoints.retry_now(backlog, "hook") == 4
        backlog.rollback()
        assert waiting(backlog) == before
        assert circuit(backlog, "hook") == ("open", False)
        assert [n.channel for n in listener.notifies(timeout=0.5)] == []
        endpoints.retry_now(backlog, "hook")
        backlog.commit()
        assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == [
            "outbox_wakeup"]


def test_a_disabled_endpoint_s_deliveries_are_made_due_and_wait(backlog: Conn) -> None:
    """At a disabled endpoint the deliveries are made due all the same (they go when it is
    enabled) and counted; it stays disabled."""
    endpoints.disable(backlog, "hook")
    assert endpoints.retry_now(backlog, "hook") == 4
    backlog.commit()
    assert endpoints.get(backlog, "hook")["enabled"] is False


@pytest.mark.parametrize(("call", "error", "says"), [
    (lambda c: endpoints.retry_now(c, "nope"), endpoints.EndpointNotFound, "nope"),
    (lambda c: endpoints.retry_now(c, "hook", tenant=""), endpoints.InvalidEndpoint, "tenant"),
    (lambda c: endpoints.retry_now(c, "hook", tenant="a\nb"), endpoints.InvalidEndpoint,
     "tenant"),
])
def test_errors_change_nothing(backlog: Conn, call: Any, error: type[Exception],
                               says: str) -> None:
    """An unknown name raises EndpointNotFound, a bad tenant InvalidEndpoint; nothing is
    made due."""
    before = waiting(backlog)
    with pytest.raises(error, match=says):
        call(backlog)
    backlog.commit()
    assert waiting(backlog) == before
    assert circuit(backlog, "hook") == ("open", False)


def test_the_async_twin(backlog: Conn, dsn: str) -> None:
    """aretry_now does on an AsyncConnection what retry_now does; a rollback leaves nothing."""
    before = waiting(backlog)

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            assert await endpoints.aretry_now(aconn, "hook", tenant="globex") == 1
            await aconn.rollback()
            assert waiting(backlog) == before
            with pytest.raises(endpoints.EndpointNotFound):
                await endpoints.aretry_now(aconn, "nope")
            await aconn.rollback()
            assert await endpoints.aretry_now(aconn, "hook") == 4
            await aconn.commit()

    asyncio.run(scenario())
    assert waiting(backlog)["globex.1"] == ("pending", "now")
    assert circuit(backlog, "hook") == ("half-open", True)
