"""docs/examples/django_endpoints.py: a customer's webhook settings on Django's own connection,
every outbox.endpoints function through its views, under the customer's tenant guard (Django,
real PostgreSQL, the real dispatcher)."""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox.testing import Receiver
from outbox.testing._receiver import Response
from tests.support.cli import run_outbox
from tests.support.dispatcher import run_once
from tests.support.django_db import django_alias
from tests.support.receiving import load_example
from tests.support.roles import ok

APP_TABLES = """
CREATE TABLE webhook_audit (tenant text, action text, detail text);
CREATE TABLE shop_order (number int, tenant text, event_id uuid);
"""


_roles = itertools.count()


@pytest.fixture(params=[None, "endpoint-manager"])
def example(request: pytest.FixtureRequest, dsn: str) -> Iterator[ModuleType]:
    """The example, its database alias pointed at the test's database, with the
    application's own tables; run as the connection's own role, and as the endpoint
    manager (`SET LOCAL ROLE` in each transaction) with `outbox grants
    --endpoint-manager` alone, beside the application's rights on its own tables."""
    role = None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(APP_TABLES)
        if request.param:
            role = f"endpoints_{os.getpid()}_{next(_roles)}"
            conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("GRANT SELECT, INSERT ON webhook_audit, shop_order TO {}")
                         .format(sql.Identifier(role)))
            ok(run_outbox(dsn, "grants", "--endpoint-manager", role, "--apply"))
    try:
        with django_alias(dsn) as alias:
            module = load_example("django_endpoints", {})
            module.DB = alias
            module.ROLE = role
            yield module
    finally:
        if role is not None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _call(example: ModuleType, method: str, where: str, customer: str = "acme",
          **form: Any) -> tuple[int, Any]:
    """The example's answer to a request, routed by its own URL patterns."""
    from django.test import RequestFactory
    from django.urls.resolvers import RegexPattern, URLResolver

    factory = RequestFactory()
    request = (factory.post(where, form, HTTP_X_CUSTOMER=customer) if method == "POST"
               else factory.get(where, form, HTTP_X_CUSTOMER=customer))
    match = URLResolver(RegexPattern(r"^/"), example).resolve(where)
    response = match.func(request, *match.args, **match.kwargs)
    return response.status_code, json.loads(response.content)


def _state(dsn: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        return (conn.execute("SELECT name, tenant, events, guarded, trace_context "
                             "FROM outbox.endpoints WHERE removed_at IS NULL "
                             "ORDER BY name").fetchall(),
                conn.execute("SELECT tenant, action, detail FROM webhook_audit").fetchall())


def test_a_customer_adds_an_endpoint_and_gets_its_secret(example: ModuleType, dsn: str) -> None:
    """201 with the new secret; the endpoint is the customer's, guarded, without trace
    context, and the audit row committed with it."""
    status, body = _call(example, "POST", "/settings/webhooks", url="https://hooks.acme.example/in",
                         events="order.*", description="Production")
    assert status == 201, body
    assert body["endpoint"] == "customer-acme"
    assert body["secret"].startswith("whsec_")
    endpoints, audit = _state(dsn)
    assert endpoints == [("customer-acme", "acme", ["order.*"], True, False)]
    assert audit == [("acme", "endpoint added", "customer-acme")]
    status, shown = _call(example, "GET", "/settings/webhooks/customer-acme")
    assert (status, shown["description"], shown["when_full"], shown["keep_dead"]) == (
        200, "Production", "drop-oldest", 7 * 86400.0)
    assert body["secret"] not in json.dumps(shown)


@pytest.mark.parametrize(("form", "says"), [
    ({"url": "ftp://hooks.acme.example/"}, "url"),
    ({"url": "http://169.254.169.254/latest/"}, "url"),
    ({"url": "http://2130706433/"}, "url"),
    ({"url": "https://hooks.acme.example/", "events": "order..x"}, "events"),
])
def test_bad_input_writes_nothing(example: ModuleType, dsn: str, form: dict[str, str],
                                  says: str) -> None:
    """A bad or internal URL, a bad pattern: 400 naming it, no endpoint and no audit row."""
    code, body = _call(example, "POST", "/settings/webhooks", **form)
    assert code == 400
    assert body["error"].startswith(says)
    assert "--" not in body["error"]
    assert _state(dsn) == ([], [])


def test_another_customers_endpoint_is_a_404(example: ModuleType, dsn: str) -> None:
    """globex asking for acme's endpoint, by any view, gets the 404 of a name nobody has,
    and changes nothing; a second endpoint of the same name is a 409."""
    assert _call(example, "POST", "/settings/webhooks", url="https://hooks.acme.example/")[0] == 201
    before = _state(dsn)
    for method, where, form in [
            ("GET", "/settings/webhooks/customer-acme", {}),
            ("POST", "/settings/webhooks/customer-acme", {"url": "https://evil.example/"}),
            ("POST", "/settings/webhooks/customer-acme/disable", {}),
            ("POST", "/settings/webhooks/customer-acme/rotate", {}),
            ("POST", "/settings/webhooks/customer-acme/remove", {}),
            ("POST", "/settings/webhooks/customer-acme/test", {}),
            ("GET", "/settings/webhooks/customer-acme/deliveries", {})]:
        assert _call(example, method, where, "globex", **form) == (
            404, {"error": "no such webhook endpoint or event"}), where
        assert _call(example, method, where.replace("customer-acme", "nobody"), "globex",
                     **form)[0] == 404
    assert _call(example, "GET", "/settings/webhooks", "globex") == (200, [])
    assert _call(example, "POST", "/settings/webhooks", url="https://x.example/")[0] == 409
    assert _state(dsn) == before


def test_the_whole_settings_page(example: ModuleType, dsn: str, receiver: Receiver) -> None:
    """Every function through the views: list, update, disable and enable, a test event
    the dispatcher delivers, the delivery log and its pages, an event's attempts, retry,
    replay, the orders page from the view joined with the application's table, rotate,
    remove."""
    url = "https://hooks.acme.example/in"
    assert _call(example, "POST", "/settings/webhooks", url=url, events="order.*")[0] == 201
    status, shown = _call(example, "POST", "/settings/webhooks/customer-acme",
                          description="Staging")
    assert (status, shown["description"]) == (200, "Staging")
    with psycopg.connect(dsn) as conn:  # the endpoint may reach the receiver of this test
        conn.execute("UPDATE outbox.endpoints SET url = %s, guarded = false, "
                     "max_attempts = 1",
                     (receiver.url,))
        for number in (1, 2):
            event_id = outbox.publish(conn, "order.placed", {"number": number}, tenant="acme")
            conn.execute("INSERT INTO shop_order VALUES (%s, 'acme', %s)", (number, event_id))
    status, listed = _call(example, "GET", "/settings/webhooks")
    assert (status, [e["name"] for e in listed]) == (200, ["customer-acme"])
    status, refused = _call(example, "POST", "/settings/webhooks/customer-acme",
                            description="Local")  # its URL is 127.0.0.1 now: refused
    assert (status, refused["error"][:4]) == (400, "url ")
    assert _call(example, "POST", "/settings/webhooks/customer-acme/disable")[0] == 200
    assert _call(example, "GET", "/settings/webhooks/customer-acme")[1]["enabled"] is False
    assert _call(example, "POST", "/settings/webhooks/customer-acme/enable")[0] == 200
    status, sent = _call(example, "POST", "/settings/webhooks/customer-acme/test")
    assert status == 200
    receiver.responder = lambda request: Response(500 if b'"number":2' in request.body else 200)
    code, log = run_once(dsn)
    assert code == 1, log  # order 2's delivery is dead
    status, page = _call(example, "GET", "/settings/webhooks/customer-acme/deliveries")
    assert status == 200
    assert [row["state"] for row in page["deliveries"]] == ["delivered", "dead", "delivered"]
    assert page["deliveries"][0]["event_id"] == sent["event_id"]
    assert page["next"] is None
    status, dead = _call(example, "GET", "/settings/webhooks/customer-acme/deliveries",
                         state="dead")
    [row] = dead["deliveries"]
    status, story = _call(example, "GET", f"/settings/events/{row['event_id']}")
    assert (status, [d["state"] for d in story]) == (200, ["dead"])
    assert [a["status"] for a in story[0]["history"]] == [500]
    assert _call(example, "GET", f"/settings/events/{row['event_id']}", "globex") == (200, [])
    status, orders = _call(example, "GET", "/settings/orders/webhooks")
    assert [(o["number"], o["state"]) for o in orders] == [(2, "dead"), (1, "delivered")]
    assert _call(example, "POST", "/settings/webhooks/customer-acme/retry") == (
        200, {"due": 0, "retried": 1})
    assert _call(example, "POST", "/settings/webhooks/customer-acme/replay",
                 event=row["event_id"]) == (200, {"replayed": 0})  # on its way already
    assert _call(example, "POST", "/settings/webhooks/customer-acme/replay", hours="1") == (
        200, {"replayed": 2})
    assert _call(example, "POST", "/settings/webhooks/customer-acme/replay",
                 event=str(uuid.uuid4()))[0] == 404
    status, rotated = _call(example, "POST", "/settings/webhooks/customer-acme/rotate")
    assert rotated["secret"].startswith("whsec_")
    assert _call(example, "POST", "/settings/webhooks/customer-acme/remove") == (
        200, {"dead_letters": 3})
    assert _call(example, "GET", "/settings/webhooks") == (200, [])


def test_a_failing_audit_row_takes_the_endpoint_back(example: ModuleType, dsn: str) -> None:
    """One transaction: when the application's own write fails, the endpoint is not added."""
    with psycopg.connect(dsn) as conn:
        conn.execute("ALTER TABLE webhook_audit ADD CHECK (tenant <> 'initech')")
    with pytest.raises(Exception, match="check"):
        _call(example, "POST", "/settings/webhooks", "initech",
              url="https://hooks.initech.example/in")
    assert _state(dsn) == ([], [])
