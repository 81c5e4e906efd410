"""docs/examples/django_endpoints.py: a customer adds an endpoint in the application's own
transaction, beside its audit row, and gets the secret once (Django, real PostgreSQL)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.support.receiving import load_example

django = pytest.importorskip("django")


@pytest.fixture
def example(dsn: str) -> Iterator[ModuleType]:
    """The example, its database alias pointed at the test's database, with the
    application's audit table."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(DATABASES={}, USE_TZ=True)
        django.setup()
    from django.db import connections

    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE webhook_audit (tenant text, action text, detail text)")
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    alias = f"t{uuid.uuid4().hex[:8]}"
    connections.settings[alias] = connections.configure_settings({"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": info["dbname"],
        "USER": info.get("user", ""), "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", ""), "PORT": str(info.get("port", ""))}})["default"]
    module = load_example("django_endpoints", {})
    module.DB = alias
    try:
        yield module
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]


def _post(example: ModuleType, customer: str, **form: Any) -> tuple[int, dict[str, Any]]:
    from django.test import RequestFactory

    request = RequestFactory().post("/settings/webhooks", form, HTTP_X_CUSTOMER=customer)
    response = example.add_webhook(request)
    return response.status_code, json.loads(response.content)


def _state(dsn: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        return (conn.execute("SELECT name, tenant, events, secret FROM outbox.endpoints "
                             "WHERE removed_at IS NULL ORDER BY name").fetchall(),
                conn.execute("SELECT tenant, action, detail FROM webhook_audit").fetchall())


def test_a_customer_adds_an_endpoint_and_gets_its_secret(example: ModuleType, dsn: str) -> None:
    """201 with the new secret; the endpoint belongs to the customer's tenant, and the audit
    row committed with it."""
    status, body = _post(example, "acme", url="https://hooks.acme.example/in",
                         events="order.*")
    assert status == 201, body
    assert body["endpoint"] == "customer-acme"
    endpoints, audit = _state(dsn)
    assert endpoints == [("customer-acme", "acme", ["order.*"], body["secret"])]
    assert audit == [("acme", "endpoint added", "customer-acme")]
    assert body["secret"].startswith("whsec_")


@pytest.mark.parametrize(("form", "status"), [
    ({"url": "ftp://hooks.acme.example/"}, 400),
    ({"url": "https://hooks.acme.example/", "events": "order..x"}, 400),
])
def test_bad_input_writes_nothing(example: ModuleType, dsn: str, form: dict[str, str],
                                  status: int) -> None:
    """A bad URL or pattern: 400 naming it, no endpoint and no audit row."""
    code, body = _post(example, "acme", **form)
    assert code == status
    assert "error" in body
    assert _state(dsn) == ([], [])


def test_a_second_endpoint_is_refused_and_the_first_kept(example: ModuleType,
                                                         dsn: str) -> None:
    """409 for a customer who has one; one endpoint and one audit row remain."""
    assert _post(example, "acme", url="https://hooks.acme.example/in")[0] == 201
    assert _post(example, "acme", url="https://other.example/in")[0] == 409
    endpoints, audit = _state(dsn)
    assert [e[0] for e in endpoints] == ["customer-acme"]
    assert len(audit) == 1


def test_a_failing_audit_row_takes_the_endpoint_back(example: ModuleType, dsn: str) -> None:
    """One transaction: when the application's own write fails, the endpoint is not added."""
    with psycopg.connect(dsn) as conn:
        conn.execute("ALTER TABLE webhook_audit ADD CHECK (tenant <> 'initech')")
    with pytest.raises(Exception, match="check"):
        _post(example, "initech", url="https://hooks.initech.example/in")
    assert _state(dsn) == ([], [])
