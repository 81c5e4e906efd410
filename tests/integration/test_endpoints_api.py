"""outbox.endpoints from the application: the operations in the caller's transaction, their
errors changing nothing, a rollback leaving nothing, and the async twins (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import outbox
from outbox import endpoints

Conn = psycopg.Connection[Any]
SECRET = "whsec_" + "QUJD" * 8


def rows(conn: Conn) -> list[tuple[Any, ...]]:
    """Every endpoint row whole, and the deliveries' states: what any call could change."""
    found = conn.execute("SELECT e::text FROM outbox.endpoints e ORDER BY id").fetchall()
    found += conn.execute("SELECT d.id::text || d.state FROM outbox.deliveries d "
                          "ORDER BY id").fetchall()
    return found


def test_add_returns_the_secret_and_list_shows_the_endpoint_without_it(conn: Conn) -> None:
    """add returns a new whsec_ secret when none is given, the given one otherwise; get and
    list give the list --json objects (the secret only as its kind, header values hidden)."""
    generated = endpoints.add(conn, "acme-hook", url="https://hooks.acme.example/in",
                              events=["order.*"], tenant="acme", max_attempts=12,
                              headers={"Authorization": "Bearer t0ken"})
    assert generated.startswith("whsec_")
    assert endpoints.add(conn, "audit", url="http://127.0.0.1:9/a", secret=SECRET) == SECRET
    conn.commit()
    shown = endpoints.get(conn, "acme-hook")
    assert {k: shown[k] for k in ("name", "events", "tenant", "max_attempts", "signing",
                                  "headers")} == {
        "name": "acme-hook", "events": ["order.*"], "tenant": "acme", "max_attempts": 12,
        "signing": "whsec", "headers": {"authorization": "(hidden)"}}
    assert generated not in repr(endpoints.list(conn))
    assert "t0ken" not in repr(shown)
    assert [e["name"] for e in endpoints.list(conn)] == ["acme-hook", "audit"]
    assert [e["name"] for e in endpoints.list(conn, tenant="acme")] == ["acme-hook"]
    assert endpoints.list(conn, tenant="globex") == []


def test_update_enable_disable_rotate_and_remove(conn: Conn) -> None:
    """update changes the options named (None: back to the default); disable and enable;
    rotate_secret returns the new secret; remove with force dead-letters what waits."""
    endpoints.add(conn, "hook", url="http://127.0.0.1:9/h", tenant="acme", rate_limit=5)
    assert endpoints.update(conn, "hook", max_attempts=3, tenant=None, rate_limit=None) == [
        "max_attempts", "rate_limit", "tenant"]
    assert endpoints.update(conn, "hook", max_attempts="3") == []
    shown = endpoints.get(conn, "hook")
    assert (shown["tenant"], shown["rate_limit"], shown["max_attempts"]) == (None, None, 3)
    endpoints.disable(conn, "hook")
    assert endpoints.get(conn, "hook")["enabled"] is False
    endpoints.enable(conn, "hook")
    assert endpoints.get(conn, "hook")["enabled"] is True
    new = endpoints.rotate_secret(conn, "hook", overlap="1h")
    assert new.startswith("whsec_")
    assert endpoints.rotate_secret(conn, "hook", secret=SECRET, overlap=timedelta(0)) == SECRET
    outbox.publish(conn, "order.placed", {})
    with pytest.raises(endpoints.EndpointBusy):
        endpoints.remove(conn, "hook")
    assert endpoints.remove(conn, "hook", force=True) == 1
    conn.commit()
    assert endpoints.list(conn) == []


def test_a_rollback_leaves_nothing_behind(conn: Conn) -> None:
    """Every operation runs in the caller's transaction and never commits: rolled back,
    the endpoints are exactly as before."""
    endpoints.add(conn, "kept", url="http://127.0.0.1:9/k", tenant="acme")
    outbox.publish(conn, "t", {}, tenant="acme")
    conn.commit()
    before = rows(conn)
    conn.commit()
    endpoints.add(conn, "new", url="http://127.0.0.1:9/n", tenant="globex")
    endpoints.update(conn, "kept", tenant="globex", max_batch=10)
    endpoints.rotate_secret(conn, "kept")
    endpoints.disable(conn, "kept")
    endpoints.remove(conn, "kept", force=True)
    conn.rollback()
    assert rows(conn) == before


@pytest.mark.parametrize(("call", "error", "says"), [
    (lambda c: endpoints.add(c, "x", url="http://127.0.0.1:9/", tenant=""),
     endpoints.InvalidEndpoint, "tenant"),
    (lambda c: endpoints.add(c, "x", url="http://127.0.0.1:9/", tenant="t" * 201),
     endpoints.InvalidEndpoint, "tenant"),
    (lambda c: endpoints.add(c, "x", url="http://127.0.0.1:9/", tenant="a\nb"),
     endpoints.InvalidEndpoint, "tenant"),
    (lambda c: endpoints.add(c, "x", url="http://127.0.0.1:9/", colour="red"),
     endpoints.InvalidEndpoint, "colour"),
    (lambda c: endpoints.add(c, "x", url="ftp://a/"), endpoints.InvalidEndpoint, "url"),
    (lambda c: endpoints.add(c, "hook", url="http://127.0.0.1:9/"),
     endpoints.EndpointExists, "hook"),
    (lambda c: endpoints.update(c, "hook", colour="red"), endpoints.InvalidEndpoint, "colour"),
    (lambda c: endpoints.update(c, "hook", tenant="caf\u00e9"),
     endpoints.InvalidEndpoint, "tenant"),
    (lambda c: endpoints.update(c, "hook", max_attempts=0),
     endpoints.InvalidEndpoint, "max_attempts"),
    (lambda c: endpoints.update(c, "nope", max_attempts=3), endpoints.EndpointNotFound, "nope"),
    (lambda c: endpoints.remove(c, "hook"), endpoints.EndpointBusy, "hook"),
    (lambda c: endpoints.enable(c, "nope"), endpoints.EndpointNotFound, "nope"),
    (lambda c: endpoints.rotate_secret(c, "hook", secret="plain"),
     endpoints.InvalidEndpoint, "secret"),
    (lambda c: endpoints.rotate_secret(c, "hook", overlap="400d"),
     endpoints.InvalidEndpoint, "overlap"),
    (lambda c: endpoints.get(c, "nope"), endpoints.EndpointNotFound, "nope"),
    (lambda c: endpoints.list(c, tenant=""), endpoints.InvalidEndpoint, "tenant"),
])
def test_each_error_changes_nothing(conn: Conn, call: Any, error: type[Exception],
                                    says: str) -> None:
    """A bad option (unknown ones too), an existing or unknown name, a busy removal: the
    error named by the rules, its message naming the culprit; the transaction goes on and
    commits nothing new."""
    endpoints.add(conn, "hook", url="http://127.0.0.1:9/h", tenant="acme")
    outbox.publish(conn, "t", {}, tenant="acme")
    conn.commit()
    before = rows(conn)
    conn.commit()
    with pytest.raises(error, match=says) as raised:
        call(conn)
    assert isinstance(raised.value, outbox.OutboxError)
    if isinstance(raised.value, endpoints.InvalidEndpoint):
        assert isinstance(raised.value, ValueError)
    conn.commit()
    assert rows(conn) == before


def test_a_generated_secret_is_never_logged(conn: Conn, caplog: pytest.LogCaptureFixture) -> None:
    """With every logger at DEBUG, the secrets add and rotate_secret generate appear in no
    log record: only in their return values."""
    caplog.set_level(logging.DEBUG)
    secrets = [endpoints.add(conn, "hook", url="http://127.0.0.1:9/h"),
               endpoints.rotate_secret(conn, "hook")]
    conn.commit()
    assert not any(secret in caplog.text for secret in secrets)


def test_the_async_twins(dsn: str) -> None:
    """aadd, aupdate, adisable, aenable, arotate_secret, aget, alist and aremove do on an
    AsyncConnection what their twins do, and a rollback leaves nothing."""
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            secret = await endpoints.aadd(aconn, "hook", url="http://127.0.0.1:9/h",
                                          tenant="acme", events=("order.*",))
            assert secret.startswith("whsec_")
            assert await endpoints.aupdate(aconn, "hook", max_batch=5) == ["max_batch"]
            await endpoints.adisable(aconn, "hook")
            await endpoints.aenable(aconn, "hook")
            assert (await endpoints.arotate_secret(aconn, "hook", secret=SECRET)) == SECRET
            await aconn.commit()
            shown = await endpoints.aget(aconn, "hook")
            assert (shown["tenant"], shown["max_batch"], shown["enabled"]) == ("acme", 5, True)
            assert [e["name"] for e in await endpoints.alist(aconn, tenant="acme")] == ["hook"]
            with pytest.raises(endpoints.EndpointExists):
                await endpoints.aadd(aconn, "hook", url="http://127.0.0.1:9/h")
            with pytest.raises(endpoints.InvalidEndpoint, match="tenant"):
                await endpoints.aupdate(aconn, "hook", tenant="")
            assert await endpoints.aremove(aconn, "hook") == 0
            await aconn.rollback()
            assert [e["name"] for e in await endpoints.alist(aconn)] == ["hook"]
            assert await endpoints.aremove(aconn, "hook") == 0
            await aconn.commit()
            assert await endpoints.alist(aconn) == []

    asyncio.run(scenario())
