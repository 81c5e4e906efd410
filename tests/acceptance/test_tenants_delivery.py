"""A tenant's events as the dispatcher delivers them: the tenant in every request (Standard
Webhooks and CloudEvents, read back by receive.Verifier), none for events without one, and
one key's order kept per tenant by the real dispatcher."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import outbox
from outbox import receive
from outbox.testing import Receiver
from tests.support.dispatcher import Dispatcher, add_endpoint

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.mark.parametrize("fmt", ["standard-webhooks", "cloudevents"])
def test_every_delivery_names_its_tenant(dsn: str, receiver: Receiver, fmt: str) -> None:
    """Published with tenant=, received with Received.tenant; without one, None."""
    with psycopg.connect(dsn) as conn:
        add_endpoint(conn, "rx", receiver.url, secret=SECRET, format=fmt)
        outbox.publish(conn, "order.created", {"n": 1}, tenant="acme")
        outbox.publish(conn, "order.created", {"n": 2})
        conn.commit()
    with Dispatcher(dsn, once=True) as dispatcher:
        assert dispatcher.wait() == 0, dispatcher.log()
    verifier = receive.Verifier(SECRET, format=fmt)  # type: ignore[arg-type]
    seen: dict[Any, str | None] = {}
    for request in receiver.wait_for(2):
        for event in verifier.verify(request.headers, request.body):
            seen[event.data["n"]] = event.tenant
    assert seen == {1: "acme", 2: None}


def test_one_key_of_two_tenants_is_two_orders(dsn: str, receiver: Receiver) -> None:
    """Each tenant's events of key k arrive in publish order, whatever the other's do."""
    with psycopg.connect(dsn) as conn:
        add_endpoint(conn, "rx", receiver.url, max_in_flight=4)
        for n in range(20):
            outbox.publish(conn, "t", {"n": n}, key="k", tenant="ab"[n % 2])
        conn.commit()
    with Dispatcher(dsn, once=True) as dispatcher:
        assert dispatcher.wait() == 0, dispatcher.log()
    arrived: dict[str, list[int]] = {"a": [], "b": []}
    for request in receiver.wait_for(20):
        body = json.loads(request.body)
        arrived[body["tenant"]].append(body["data"]["n"])
    assert arrived == {"a": list(range(0, 20, 2)), "b": list(range(1, 20, 2))}
