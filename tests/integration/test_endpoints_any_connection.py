"""outbox.endpoints answers the same on Django's connection, one set up as Django sets its up
(json and jsonb loaded as text, times without a zone, a RawCursor factory), an
AsyncConnection set up so, and a plain one; anything else is a TypeError (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.string import TextLoader

import outbox
from outbox import endpoints
from tests.support.django_db import django_alias, django_connection, django_like

SECRET = "whsec_" + "QUJD" * 8
Call = Callable[..., Any]
_ISO = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(\+00:00|Z)?")


def _setup(dsn: str) -> uuid.UUID:
    """A customer's endpoint with headers, and two of its events: one delivered, one dead
    after a failed attempt; committed. The dead one's id."""
    with psycopg.connect(dsn) as conn:
        endpoints.add(conn, "acme-hook", url="https://hooks.acme.example/in", tenant="acme",
                      headers={"Authorization": "Bearer t0ken"}, secret=SECRET)
        endpoints.add(conn, "audit", url="https://audit.example/in")
        delivered = outbox.publish(conn, "order.placed", {"n": 1}, tenant="acme")
        dead = outbox.publish(conn, "order.placed", {"n": 2}, tenant="acme")
        conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now(), "
                     "attempts = 1, last_status = 200 WHERE event_id = %s", (delivered,))
        conn.execute("UPDATE outbox.deliveries SET state = 'dead', finished_at = now(), "
                     "attempts = 1, last_status = 500, last_error = 'HTTP 500' "
                     "WHERE event_id = %s", (dead,))
        conn.execute("INSERT INTO outbox.attempts (delivery_id, attempt, status, reason, error) "
                     "SELECT id, 1, 500, 'http_5xx', 'HTTP 500' FROM outbox.deliveries "
                     "WHERE event_id = %s", (dead,))
    return dead


def _scenario(call: Call, dead: uuid.UUID) -> list[Any]:
    """Every function once, in an order whose answers do not depend on the connection."""
    return [
        call("get", "acme-hook"),
        call("list", as_tenant="acme"),
        call("deliveries", "acme-hook", as_tenant="acme"),
        call("deliveries", state="dead", limit=1),
        call("attempts", dead, as_tenant="acme"),
        call("update", "acme-hook", headers={"X-Customer": "acme"}, max_attempts=3),
        call("update", "acme-hook", as_tenant="acme", check_url=True, description="mine"),
        call("get", "acme-hook", as_tenant="acme"),
        call("rotate_secret", "acme-hook", secret=SECRET.replace("QUJD", "REVG", 1),
             as_tenant="acme"),
        call("disable", "acme-hook", as_tenant="acme"),
        call("enable", "acme-hook"),
        call("retry_now", "acme-hook", as_tenant="acme"),
        call("replay", "acme-hook", event_ids=[dead], dry_run=True, as_tenant="acme"),
        call("retry_dead", "acme-hook", as_tenant="acme"),
        call("replay", "acme-hook", since=timedelta(hours=1), as_tenant="acme"),
        call("send_test", "acme-hook", as_tenant="acme"),
        call("add", "acme-two", url="https://two.acme.example/", as_tenant="acme",
             headers={"A": "b"}, check_url=True),
        call("remove", "acme-hook", force=True, as_tenant="acme"),
        call("list"),
    ]


def _shape(value: Any) -> Any:
    """What must not differ between connections; times by kind (aware or not), ids and
    generated secrets by type, as they differ between runs."""
    if isinstance(value, datetime):
        return ("datetime", value.utcoffset() is not None)
    if isinstance(value, uuid.UUID):
        return "uuid"
    if isinstance(value, dict):
        return {k: "cursor" if k == "cursor" else _shape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shape(v) for v in value]
    if isinstance(value, str) and value.startswith("whsec_"):
        return "whsec_..."
    if isinstance(value, str) and _ISO.fullmatch(value):
        return ("iso", value.endswith(("+00:00", "Z")))
    return value


def _sync(conn: psycopg.Connection[Any]) -> Call:
    return lambda name, *args, **kwargs: getattr(endpoints, name)(conn, *args, **kwargs)


def test_every_function_answers_the_same_on_any_psycopg_connection(dsn: str) -> None:
    """Each function, headers included, gives on Django's connection, on one with Django's
    USE_TZ=False adapters (jsonb, json as text; naive times) and a RawCursor factory, and
    on an AsyncConnection so set up, what it gives on a plain connection: dicts, lists,
    aware datetimes; each call in the caller's transaction, rolled back after."""
    dead = _setup(dsn)
    with psycopg.connect(dsn) as plain:
        expected = _shape(_scenario(_sync(plain), dead))
        plain.rollback()
    assert [row["created_at"] for row in expected[2]] == [("datetime", True)] * 2  # aware

    with django_like(dsn) as like:
        assert _shape(_scenario(_sync(like), dead)) == expected
        like.rollback()

    from django.db import transaction

    with django_alias(dsn) as alias, transaction.atomic(using=alias):
        assert _shape(_scenario(_sync(django_connection(alias)), dead)) == expected
        transaction.set_rollback(True, using=alias)

    loop = asyncio.new_event_loop()
    try:
        aconn = loop.run_until_complete(psycopg.AsyncConnection.connect(
            dsn, cursor_factory=psycopg.AsyncRawCursor))
        aconn.adapters.register_loader("jsonb", TextLoader)
        aconn.adapters.register_loader("json", TextLoader)

        def acall(name: str, *args: Any, **kwargs: Any) -> Any:
            return loop.run_until_complete(getattr(endpoints, "a" + name)(aconn, *args,
                                                                          **kwargs))
        assert _shape(_scenario(acall, dead)) == expected
        loop.run_until_complete(aconn.rollback())
        loop.run_until_complete(aconn.close())
    finally:
        loop.close()
    with psycopg.connect(dsn) as plain:
        assert [e["name"] for e in endpoints.list(plain)] == ["acme-hook", "audit"]


def test_the_first_functions_answer_as_on_a_plain_connection(dsn: str) -> None:
    """add, get, list, update (headers too), rotate_secret, disable, enable, retry_now and
    remove on a connection with Django's USE_TZ=False adapters and a RawCursor factory
    answer as on a plain one: the times of get() carry their zone."""
    _setup(dsn)

    def scenario(call: Call) -> list[Any]:
        return [call("add", "two", url="https://two.example/", headers={"A": "b"}),
                call("get", "acme-hook"), call("list", tenant="acme"),
                call("update", "acme-hook", headers={"B": "c"}), call("get", "acme-hook"),
                call("rotate_secret", "acme-hook"), call("disable", "acme-hook"),
                call("enable", "acme-hook"), call("retry_now", "acme-hook"),
                call("remove", "two")]

    with psycopg.connect(dsn) as plain:
        expected = _shape(scenario(_sync(plain)))
        plain.rollback()
    assert expected[1]["created_at"] == ("iso", True)
    with django_like(dsn) as like:
        assert _shape(scenario(_sync(like))) == expected


def test_times_are_aware_and_headers_survive_on_djangos_connection(dsn: str) -> None:
    """On Django's connection inside atomic(): get() shows header names after update(headers=)
    and deliveries() gives aware datetimes, as on a plain connection."""
    _setup(dsn)
    from django.db import transaction

    with django_alias(dsn) as alias, transaction.atomic(using=alias):
        pg = django_connection(alias)
        assert endpoints.update(pg, "acme-hook", headers={"X-One": "1"}) == ["headers"]
        assert endpoints.get(pg, "acme-hook")["headers"] == {"x-one": "(hidden)"}
        rows = endpoints.deliveries(pg, "acme-hook")
        assert [r["state"] for r in rows] == ["dead", "delivered"]
        assert all(r["created_at"].utcoffset() is not None for r in rows)


def test_anything_but_a_psycopg_connection_is_a_type_error(dsn: str) -> None:
    """A DB-API connection, Django's wrapper, None or the other kind of psycopg connection:
    TypeError saying what to pass, before any statement."""
    _setup(dsn)
    with django_alias(dsn) as alias:
        from django.db import connections

        with pytest.raises(TypeError, match=r"connections\[alias\]\.connection"):
            endpoints.get(connections[alias], "acme-hook")
    with pytest.raises(TypeError, match=r"psycopg 3 Connection, not NoneType"):
        endpoints.list(None)

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            with pytest.raises(TypeError, match=r"a\.\.\. twin"):
                endpoints.get(aconn, "acme-hook")  # type: ignore[arg-type]
        with psycopg.connect(dsn) as conn, pytest.raises(TypeError, match="without the a"):
            await endpoints.aget(conn, "acme-hook")

    asyncio.run(scenario())
