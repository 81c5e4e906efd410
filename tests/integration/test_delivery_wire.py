"""What arrives on the wire, checked by the receivers' own libraries.

A Standard Webhooks receiver verifies with the ``standardwebhooks`` library,
a CloudEvents receiver parses with the ``cloudevents`` SDK: the requests the
real dispatcher sends must satisfy both, and carry the published payload,
custom headers and batches as documented.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from outbox.testing import Receiver
from tests.support.dispatcher import add_endpoint, delivery, publish, run_once

try:  # cloudevents 1.x
    from cloudevents.http import from_http
except ImportError:  # cloudevents 2.x keeps the 1.x API here
    from cloudevents.v1.http import from_http

PAYLOAD = {"order": 7, "lines": [{"sku": "A-1", "qty": 2}], "note": "été"}


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def deliver_one(conn: psycopg.Connection[Any], dsn: str, receiver: Receiver,
                env: dict[str, str] | None = None, **options: Any) -> tuple[Any, Any]:
    """Publish one event, run --once, return (event id, the one request that arrived)."""
    event_id = publish(conn, "order.created", PAYLOAD, **options)
    code, log = run_once(dsn, env=env)
    assert code == 0, log
    [request] = receiver.snapshot()
    assert delivery(conn, event_id)["state"] == "delivered"
    return event_id, request


def test_standard_webhooks_request_verifies_and_carries_the_event(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """A signed request verifies with standardwebhooks; the body is id/type/timestamp/key/data."""
    secret = new_secret()
    add_endpoint(conn, "signed", receiver.url, secret=secret)
    event_id, request = deliver_one(conn, dsn, receiver, key="order-7")
    assert request.method == "POST"
    assert request.header("content-type") == "application/json"
    assert request.header("webhook-id") == str(event_id)
    body = Webhook(secret).verify(request.body, request.headers)
    assert set(body) == {"id", "type", "timestamp", "key", "data"}
    assert body["id"] == str(event_id)
    assert body["type"] == "order.created"
    assert body["key"] == "order-7"
    assert body["data"] == PAYLOAD
    assert datetime.fromisoformat(body["timestamp"]).tzinfo is not None
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(request.body, request.headers)


def test_env_secret_is_read_from_the_dispatcher_environment(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """An env:NAME secret signs with the value of NAME in the dispatcher's environment."""
    secret = new_secret()
    add_endpoint(conn, "from-env", receiver.url, secret="env:OUTBOX_SECRET_ORDERS")
    _, request = deliver_one(conn, dsn, receiver, env={"OUTBOX_SECRET_ORDERS": secret})
    assert Webhook(secret).verify(request.body, request.headers)["data"] == PAYLOAD


@pytest.mark.parametrize("name", ["OUTBOX_DSN", "PGPASSWORD", "DATABASE_URL"])
def test_env_secret_naming_the_configuration_is_never_used(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver, name: str) -> None:
    """An endpoint written by hand with env: naming the configuration sends nothing.

    The variable is set, to a value that would make a valid key: its delivery
    waits, the problem is logged naming the variable, and the value is not.
    """
    value = new_secret()
    add_endpoint(conn, "by-hand", receiver.url, secret=f"env:{name}")
    event_id = publish(conn, "order.created", PAYLOAD)
    code, log = run_once(dsn, "--log-level", "DEBUG", env={name: value})
    assert code == 0, log
    assert receiver.snapshot() == []
    assert delivery(conn, event_id)["state"] == "pending"
    assert f"env:{name} is not allowed" in log
    assert value[6:] not in log


def test_env_secret_of_the_contracts_example_signs(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """env:WORKFLOW_WEBHOOK_SECRET, holding whsec_..., signs as the docs show it."""
    secret = new_secret()
    add_endpoint(conn, "workflow", receiver.url, secret="env:WORKFLOW_WEBHOOK_SECRET")
    _, request = deliver_one(conn, dsn, receiver, env={"WORKFLOW_WEBHOOK_SECRET": secret})
    assert Webhook(secret).verify(request.body, request.headers)["data"] == PAYLOAD


def test_env_secret_naming_a_variable_without_whsec_is_never_used(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """env:AWS_SECRET_ACCESS_KEY, a valid-looking base64 key, never signs: nothing is sent,
    and the log names neither its value nor its decoded length."""
    value = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # 30 bytes as base64
    add_endpoint(conn, "cloud", receiver.url, secret="env:AWS_SECRET_ACCESS_KEY")
    event_id = publish(conn, "order.created", PAYLOAD)
    code, log = run_once(dsn, "--log-level", "DEBUG", env={"AWS_SECRET_ACCESS_KEY": value})
    assert code == 0, log
    assert receiver.snapshot() == []
    assert delivery(conn, event_id)["state"] == "pending"
    assert "no variable AWS_SECRET_ACCESS_KEY holding a whsec_ secret" in log
    assert value not in log
    assert "30-byte" not in log


def test_during_rotation_old_and_new_secret_both_verify(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """With an unexpired previous secret, receivers holding either secret accept the request."""
    new, old, expired = new_secret(), new_secret(), new_secret()
    now = datetime.now(UTC)
    add_endpoint(conn, "rotating", receiver.url, secret=new, previous_secrets=[
        {"secret": old, "expires_at": (now + timedelta(hours=1)).isoformat()},
        {"secret": expired, "expires_at": (now - timedelta(hours=1)).isoformat()},
    ])
    _, request = deliver_one(conn, dsn, receiver)
    assert len(request.header("webhook-signature").split()) == 2
    Webhook(new).verify(request.body, request.headers)
    Webhook(old).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(expired).verify(request.body, request.headers)


def test_cloudevents_binary_mode_parses_with_the_sdk(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """A cloudevents endpoint gets a binary-mode request: ce-id, ce-type, ce-subject, payload."""
    add_endpoint(conn, "ce", receiver.url, format="cloudevents")
    event_id, request = deliver_one(conn, dsn, receiver, key="order-7")
    assert request.header("ce-specversion") == "1.0"
    event = from_http(request.headers, request.body)
    assert event["id"] == str(event_id)
    assert event["type"] == "order.created"
    assert event["subject"] == "order-7"
    assert event["source"]
    assert datetime.fromisoformat(event["time"]).tzinfo is not None
    assert event.data == PAYLOAD


def test_publish_and_endpoint_headers_arrive(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """publish(headers=...) and the endpoint's headers are sent as HTTP headers."""
    add_endpoint(conn, "with-headers", receiver.url,
                 headers={"Authorization": "Bearer s3cr3t-t0ken", "X-Team": "orders"})
    _, request = deliver_one(conn, dsn, receiver,
                             headers={"x-tenant": "acme", "x-request-id": "r-42"})
    assert request.header("authorization") == "Bearer s3cr3t-t0ken"
    assert request.header("x-team") == "orders"
    assert request.header("x-tenant") == "acme"
    assert request.header("x-request-id") == "r-42"


def test_max_batch_sends_arrays_and_every_event_once(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """max_batch=10: each request is a JSON array of at most 10 event bodies; each event once."""
    add_endpoint(conn, "batched", receiver.url, max_batch=10)
    ids = {str(publish(conn, "order.created", {"n": n})): n for n in range(25)}
    code, log = run_once(dsn)
    assert code == 0, log
    seen: list[str] = []
    sizes: list[int] = []
    for request in receiver.snapshot():
        assert request.header("content-type") == "application/json"
        items = json.loads(request.body)
        assert isinstance(items, list)
        sizes.append(len(items))
        for item in items:
            assert set(item) == {"id", "type", "timestamp", "key", "data"}
            assert item["data"] == {"n": ids[item["id"]]}
            seen.append(item["id"])
    assert sorted(seen) == sorted(ids)
    assert max(sizes) <= 10
    assert max(sizes) > 1  # the 25 events were due together: some request carried several
