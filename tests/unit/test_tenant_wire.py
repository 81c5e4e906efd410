"""An event's tenant on the wire: the Standard Webhooks body's "tenant" member, CloudEvents'
tenant attribute (ce-tenant in binary mode), read back as Received.tenant; none: as before."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from dispatcher.policy.envelope import encode
from dispatcher.policy.model import Endpoint, EventData
from outbox import receive
from outbox._shared.wire import secret_key
from outbox.testing import signed_request

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def _event(tenant: str | None) -> EventData:
    return EventData(id=uuid.uuid4(), type="order.created", key="o-7", payload='{"id": 7}',
                     headers={}, created_at=datetime.now(UTC), tenant=tenant)


def _endpoint(fmt: str = "standard-webhooks", max_batch: int = 1) -> Endpoint:
    return Endpoint(id=1, name="e", url="http://127.0.0.1:9/", keys=(secret_key(SECRET),),
                    format=fmt, max_batch=max_batch)  # type: ignore[arg-type]


def test_the_standard_webhooks_body_names_the_tenant() -> None:
    """The body gains "tenant"; the Standard Webhooks library verifies it; Received has it."""
    headers, body = encode(_endpoint(), [_event("acme")], datetime.now(UTC))
    assert json.loads(body)["tenant"] == "acme"
    Webhook(SECRET).verify(body, dict(headers))
    [got] = receive.Verifier(SECRET).verify(dict(headers), body)
    assert got.tenant == "acme"


def test_an_event_without_a_tenant_is_sent_as_before() -> None:
    """No "tenant" member, no ce-tenant header; Received.tenant is None."""
    for fmt in ("standard-webhooks", "cloudevents"):
        headers, body = encode(_endpoint(fmt), [_event(None)], datetime.now(UTC))
        assert b"tenant" not in body
        assert "ce-tenant" not in dict(headers)
        [got] = receive.Verifier(SECRET, format=fmt).verify(
            dict(headers), body)
        assert got.tenant is None


@pytest.mark.parametrize("max_batch", [1, 10])
def test_cloudevents_carry_the_tenant_attribute(max_batch: int) -> None:
    """Binary mode: the ce-tenant header; a batch: each event's "tenant" attribute."""
    headers, body = encode(_endpoint("cloudevents", max_batch), [_event("acme")],
                            datetime.now(UTC))
    if max_batch == 1:
        assert dict(headers)["ce-tenant"] == "acme"
    else:
        assert json.loads(body)[0]["tenant"] == "acme"
    [got] = receive.Verifier(SECRET, format="cloudevents").verify(dict(headers), body)
    assert got.tenant == "acme"


def test_a_standard_webhooks_request_with_a_ce_tenant_header_is_refused() -> None:
    """An unsigned ce-tenant header cannot make a Standard Webhooks verifier read it."""
    request = signed_request(SECRET, "order.created", {"id": 7}, tenant="acme")
    with pytest.raises(receive.InvalidDelivery):
        receive.Verifier(SECRET).verify({**request.headers, "ce-tenant": "evil"}, request.body)


def test_signed_request_carries_the_tenant() -> None:
    """outbox.testing builds what the dispatcher sends, tenant included."""
    request = signed_request(SECRET, "order.created", {"id": 7}, tenant="acme")
    assert json.loads(request.body)["tenant"] == "acme"
    assert receive.Verifier(SECRET).verify(request.headers, request.body)[0].tenant == "acme"


@pytest.mark.parametrize("tenant", ["a\r\nx-injected: 1", "", "t" * 201, "caf\u00e9", "\x00"])
def test_a_tenant_the_check_would_refuse_never_reaches_a_header(tenant: str) -> None:
    """A stored tenant that is not 1-200 printable ASCII (written by hand before the
    tables' CHECK) is left out of ce-tenant rather than put into the request's head."""
    headers, _ = encode(_endpoint("cloudevents"), [_event(tenant)], datetime.now(UTC))
    assert "ce-tenant" not in dict(headers)
    assert all("\r" not in v and "\n" not in v for _, v in headers)


def test_binary_mode_refuses_a_ce_tenant_publish_would_refuse() -> None:
    """A ce-tenant of more than 200 characters, or not printable ASCII, is InvalidDelivery;
    one that is well formed is read as it is (unsigned: docs/receiving.md)."""
    headers, body = encode(_endpoint("cloudevents"), [_event("acme")], datetime.now(UTC))
    verifier = receive.Verifier(SECRET, format="cloudevents")
    for bad in ("t" * 201, "caf\u00e9", "a\tb"):
        with pytest.raises(receive.InvalidDelivery, match="ce-tenant"):
            verifier.verify({**dict(headers), "ce-tenant": bad}, body)
    [got] = verifier.verify({**dict(headers), "ce-tenant": "other"}, body)
    assert got.tenant == "other"
