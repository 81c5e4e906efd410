"""The tenant guard (as_tenant=): a call made for one tenant finds only that tenant's endpoints;
another tenant's, or one of no tenant, is not found exactly as an unknown name is, and nothing
changes (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import outbox
from outbox import endpoints
from tests.support.dispatcher import wait_until

Conn = psycopg.Connection[Any]


def everything(conn: Conn) -> list[tuple[Any, ...]]:
    """Every row a call could change: endpoints, events, deliveries, attempts, states."""
    found: list[tuple[Any, ...]] = []
    for table in ("endpoints", "events", "deliveries", "attempts", "endpoint_state",
                  "endpoint_backlog"):
        found += conn.execute(f"SELECT '{table}', t::text FROM outbox.{table} t "
                              "ORDER BY 2").fetchall()
    return found


@pytest.fixture
def tenants(conn: Conn) -> dict[str, Any]:
    """acme's and globex's endpoints, the operator's audit endpoint (no tenant), an event of
    each tenant, each delivery dead: committed. The events' ids by tenant."""
    endpoints.add(conn, "acme-hook", url="https://hooks.acme.example/", tenant="acme")
    endpoints.add(conn, "globex-hook", url="https://hooks.globex.example/", tenant="globex",
                  headers={"Authorization": "Bearer globex"})
    endpoints.add(conn, "audit", url="https://audit.internal/", max_pending=100)
    ids = {tenant: outbox.publish(conn, "order.placed", {"t": tenant}, tenant=tenant)
           for tenant in ("acme", "globex")}
    conn.execute("UPDATE outbox.deliveries SET state = 'dead', finished_at = now(), "
                 "attempts = 1, last_error = 'HTTP 500'")
    conn.commit()
    return ids


NAMED: list[tuple[str, Callable[[Conn, str], Any]]] = [
    ("get", lambda c, n: endpoints.get(c, n, as_tenant="acme")),
    ("update", lambda c, n: endpoints.update(c, n, as_tenant="acme",
                                             url="https://evil.example/")),
    ("update headers", lambda c, n: endpoints.update(c, n, as_tenant="acme",
                                                     headers={"X": "y"})),
    ("remove", lambda c, n: endpoints.remove(c, n, force=True, as_tenant="acme")),
    ("enable", lambda c, n: endpoints.enable(c, n, as_tenant="acme")),
    ("disable", lambda c, n: endpoints.disable(c, n, as_tenant="acme")),
    ("rotate_secret", lambda c, n: endpoints.rotate_secret(c, n, as_tenant="acme")),
    ("retry_now", lambda c, n: endpoints.retry_now(c, n, as_tenant="acme")),
    ("deliveries", lambda c, n: endpoints.deliveries(c, n, as_tenant="acme")),
    ("replay", lambda c, n: endpoints.replay(c, n, since=timedelta(days=1),
                                             as_tenant="acme")),
    ("retry_dead", lambda c, n: endpoints.retry_dead(c, n, as_tenant="acme")),
    ("send_test", lambda c, n: endpoints.send_test(c, n, as_tenant="acme")),
]


@pytest.mark.parametrize(("what", "call"), NAMED, ids=[what for what, _ in NAMED])
@pytest.mark.parametrize("name", ["globex-hook", "audit"])
def test_another_tenants_endpoint_is_not_found_as_an_unknown_one(
        conn: Conn, tenants: dict[str, Any], what: str, call: Callable[[Conn, str], Any],
        name: str) -> None:
    """Under as_tenant='acme', globex's endpoint and the operator's (no tenant) raise
    EndpointNotFound with the very message an unknown name gets; nothing changes."""
    with pytest.raises(endpoints.EndpointNotFound) as unknown:
        call(conn, "nope")
    conn.rollback()
    before = everything(conn)
    with pytest.raises(endpoints.EndpointNotFound) as raised:
        call(conn, name)
    assert str(raised.value) == str(unknown.value).replace("nope", name)
    conn.commit()
    assert everything(conn) == before
    call(conn, "acme-hook")  # the tenant's own is found


def test_add_makes_the_endpoint_the_tenants(conn: Conn, tenants: dict[str, Any]) -> None:
    """add under as_tenant: the endpoint is that tenant's; another tenant= is refused; a
    name another tenant holds gets the same EndpointExists as one of its own."""
    endpoints.add(conn, "acme-two", url="https://two.acme.example/", as_tenant="acme")
    endpoints.add(conn, "acme-three", url="https://3.acme.example/", tenant="acme",
                  as_tenant="acme")
    assert endpoints.get(conn, "acme-two")["tenant"] == "acme"
    conn.commit()
    before = everything(conn)
    with pytest.raises(endpoints.InvalidEndpoint, match=r"^tenant ") as other:
        endpoints.add(conn, "acme-four", url="https://4.acme.example/", tenant="globex",
                      as_tenant="acme")
    assert "as_tenant" in str(other.value)
    with pytest.raises(endpoints.EndpointExists) as own:
        endpoints.add(conn, "acme-hook", url="https://x.example/", as_tenant="acme")
    with pytest.raises(endpoints.EndpointExists) as theirs:
        endpoints.add(conn, "globex-hook", url="https://x.example/", as_tenant="acme")
    assert str(theirs.value) == str(own.value).replace("acme-hook", "globex-hook")
    conn.commit()
    assert everything(conn) == before


def test_update_cannot_move_the_endpoint(conn: Conn, tenants: dict[str, Any]) -> None:
    """update under as_tenant refuses tenant= (to another tenant, to none, to its own)."""
    before = everything(conn)
    for tenant in ("globex", None, "acme"):
        with pytest.raises(endpoints.InvalidEndpoint, match=r"^tenant cannot be changed"):
            endpoints.update(conn, "acme-hook", tenant=tenant, as_tenant="acme")
    conn.commit()
    assert everything(conn) == before
    assert endpoints.update(conn, "acme-hook", max_attempts=3, as_tenant="acme") == [
        "max_attempts"]


def test_list_and_the_log_cover_the_tenants_endpoints_only(conn: Conn,
                                                           tenants: dict[str, Any]) -> None:
    """list and deliveries under as_tenant: acme's endpoints alone (tenant= narrows further);
    attempts of globex's event, and a replay of it by id, read as an unknown event."""
    endpoints.add(conn, "acme-two", url="https://two.acme.example/", as_tenant="acme")
    assert [e["name"] for e in endpoints.list(conn, as_tenant="acme")] == [
        "acme-hook", "acme-two"]
    assert endpoints.list(conn, tenant="globex", as_tenant="acme") == []
    assert {r["endpoint"] for r in endpoints.deliveries(conn, as_tenant="acme")} == {
        "acme-hook"}
    assert {r["endpoint"] for r in endpoints.deliveries(conn)} == {
        "acme-hook", "globex-hook", "audit"}
    assert endpoints.attempts(conn, tenants["globex"], as_tenant="acme") == []
    assert [d["endpoint"] for d in endpoints.attempts(conn, tenants["acme"],
                                                      as_tenant="acme")] == ["acme-hook"]
    with pytest.raises(outbox.errors.EventsNotFound) as theirs:
        endpoints.replay(conn, "acme-hook", event_ids=[tenants["globex"]], as_tenant="acme")
    assert str(tenants["globex"]) in str(theirs.value)


def test_what_a_customer_sends_reaches_their_endpoint_alone(conn: Conn,
                                                            tenants: dict[str, Any]) -> None:
    """send_test, replay and retry_dead for acme make deliveries at acme's endpoint only,
    of acme's events only: globex's endpoint and the operator's get nothing."""
    conn.execute("DELETE FROM outbox.deliveries")
    conn.commit()
    test_id = endpoints.send_test(conn, "acme-hook", as_tenant="acme", data={"hello": 1})
    assert endpoints.replay(conn, "acme-hook", since=timedelta(days=1), as_tenant="acme") == 1
    rows = conn.execute("SELECT e.name, d.tenant, ev.tenant FROM outbox.deliveries d "
                        "JOIN outbox.endpoints e ON e.id = d.endpoint_id "
                        "JOIN outbox.events ev ON ev.id = d.event_id ORDER BY d.id").fetchall()
    assert rows == [("acme-hook", "acme", "acme")] * 2
    assert conn.execute("SELECT tenant, type, payload::text FROM outbox.events WHERE id = %s",
                        (test_id,)).fetchone() == ("acme", "outbox.test", '{"hello":1}')


def test_the_async_twins_guard_alike(dsn: str, tenants: dict[str, Any]) -> None:
    """aget, aupdate, aremove, areplay, adeliveries ... under as_tenant find globex's
    endpoint no more than their twins do."""
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            for call in (endpoints.aget(aconn, "globex-hook", as_tenant="acme"),
                         endpoints.aupdate(aconn, "audit", as_tenant="acme", max_batch=2),
                         endpoints.aremove(aconn, "globex-hook", as_tenant="acme"),
                         endpoints.adisable(aconn, "audit", as_tenant="acme"),
                         endpoints.areplay(aconn, "globex-hook", since=timedelta(days=1),
                                           as_tenant="acme"),
                         endpoints.asend_test(aconn, "audit", as_tenant="acme"),
                         endpoints.adeliveries(aconn, "globex-hook", as_tenant="acme")):
                with pytest.raises(endpoints.EndpointNotFound):
                    await call
            assert [e["name"] for e in await endpoints.alist(aconn, as_tenant="globex")] == [
                "globex-hook"]

    asyncio.run(scenario())


@pytest.mark.parametrize("what", ["update", "disable", "rotate_secret", "remove", "send_test"])
def test_an_endpoint_moved_meanwhile_is_not_found(dsn: str, conn: Conn,
                                                  tenants: dict[str, Any], what: str) -> None:
    """The guard is part of each statement that finds the endpoint: a call for acme that
    waits on a transaction moving acme's endpoint to globex finds it globex's once that
    commits, and changes nothing (no read-then-check in Python)."""
    calls: dict[str, Callable[[Conn], Any]] = {
        "update": lambda c: endpoints.update(c, "acme-hook", as_tenant="acme",
                                             url="https://evil.example/"),
        "disable": lambda c: endpoints.disable(c, "acme-hook", as_tenant="acme"),
        "rotate_secret": lambda c: endpoints.rotate_secret(c, "acme-hook", as_tenant="acme"),
        "remove": lambda c: endpoints.remove(c, "acme-hook", force=True, as_tenant="acme"),
        "send_test": lambda c: endpoints.send_test(c, "acme-hook", as_tenant="acme"),
    }
    outcome: list[BaseException | None] = []
    with psycopg.connect(dsn) as mover:
        mover.execute("UPDATE outbox.endpoints SET tenant = 'globex' WHERE name = 'acme-hook'")
        worker = threading.Thread(target=_attempt, args=(dsn, calls[what], outcome))
        worker.start()
        wait_until(lambda: _waiting(conn), what="the call to wait for the row")
        before = everything(conn)
        conn.commit()
        mover.commit()
    worker.join(10)
    assert isinstance(outcome[0], endpoints.EndpointNotFound), outcome
    after = everything(conn)
    moved = [row for row in before if "acme-hook" in row[1]]
    assert [row for row in after if row not in before] == [
        (t, text.replace(",acme,", ",globex,")) for t, text in moved]


def _attempt(dsn: str, call: Callable[[Conn], Any], outcome: list[BaseException | None]) -> None:
    with psycopg.connect(dsn) as conn:
        try:
            call(conn)
            conn.commit()
            outcome.append(None)
        except Exception as exc:
            outcome.append(exc)


def _waiting(conn: Conn) -> bool:
    row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                       "AND datname = current_database()").fetchone()
    conn.commit()
    return bool(row and row[0])
