"""outbox.receive.Verifier refuses what unsigned headers or absurd sizes would otherwise decide."""

from __future__ import annotations

import base64
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from dispatcher.policy.envelope import encode
from dispatcher.policy.model import Endpoint, EventData
from outbox import receive
from outbox._shared.wire import sign

SECRET = "whsec_" + base64.b64encode(b"the receiver's secret, 32 bytes!").decode()
CREATED = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def key_of(secret: str) -> bytes:
    """The key bytes of a whsec_ secret."""
    return base64.b64decode(secret.removeprefix("whsec_"))


def captured(fmt: str = "standard-webhooks", max_batch: int = 1) -> tuple[dict[str, str], bytes]:
    """A request as the dispatcher signs it for an order.created event keyed 'customer-7'."""
    ev = EventData(id=uuid.uuid4(), type="order.created", key="customer-7",
                   payload='{"order_id": 7}', headers={}, created_at=CREATED)
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/", keys=(key_of(SECRET),),
                        max_batch=max_batch, format=fmt)  # type: ignore[arg-type]
    headers, body = encode(endpoint, [ev], datetime.now(UTC))
    return dict(headers), body


def refused(verifier: receive.Verifier, headers: Any, body: bytes, match: str) -> None:
    """verify raises InvalidDelivery saying ``match``."""
    with pytest.raises(receive.InvalidDelivery, match=match):
        verifier.verify(headers, body)


def test_ce_headers_added_to_a_captured_standard_webhooks_request_are_refused() -> None:
    """The reported forgery: ce-type and ce-subject added to a signed request, InvalidDelivery."""
    headers, body = captured()
    verifier = receive.Verifier(SECRET)
    assert [(e.type, e.key) for e in verifier.verify(headers, body)] == [
        ("order.created", "customer-7")]
    forged = {**headers, "ce-specversion": "1.0", "ce-id": headers["webhook-id"],
              "ce-type": "order.refunded", "ce-subject": "attacker",
              "ce-time": "2024-05-01T12:00:00Z"}
    refused(verifier, forged, body, "ce-")
    refused(verifier, {**headers, "ce-type": "order.refunded", "ce-subject": "attacker"}, body,
            "ce-subject")
    refused(verifier, {**headers, "Ce-Type": "order.refunded"}, body, "ce-type")
    for media in ("application/cloudevents-batch+json", "application/cloudevents+json",
                  "Application/CloudEvents-Batch+JSON; charset=utf-8"):
        refused(verifier, {**headers, "content-type": media}, body, "content type")


def test_a_cloudevents_verifier_refuses_standard_webhooks_and_mixed_requests() -> None:
    """format='cloudevents': a plain JSON request, or ce- headers beside a batch, is refused."""
    verifier = receive.Verifier(SECRET, format="cloudevents")
    headers, body = captured()
    refused(verifier, headers, body, "not a CloudEvents delivery")
    batch_headers, batch_body = captured("cloudevents", max_batch=5)
    assert len(verifier.verify(batch_headers, batch_body)) == 1
    refused(verifier, {**batch_headers, "ce-type": "order.refunded"}, batch_body,
            "without ce- headers")
    binary_headers, binary_body = captured("cloudevents")
    assert verifier.verify(binary_headers, binary_body)[0].type == "order.created"
    refused(verifier, {**binary_headers, "content-type": "application/cloudevents+json"},
            binary_body, "without ce- headers")
    refused(receive.Verifier(SECRET), binary_headers, binary_body, "ce-")


def test_a_get_only_headers_object_is_still_searched_for_ce_headers() -> None:
    """Headers that offer get() alone: the CloudEvents attributes are looked up by name."""
    headers, body = captured()

    class GetOnly:
        def __init__(self, values: dict[str, str]) -> None:
            self._values = values

        def get(self, key: str, /) -> str | None:
            return self._values.get(key)

    assert receive.Verifier(SECRET).verify(GetOnly(headers), body)[0].type == "order.created"
    refused(receive.Verifier(SECRET), GetOnly({**headers, "ce-subject": "attacker"}), body,
            "ce-subject")


def test_an_unknown_format_is_a_value_error_at_construction() -> None:
    """Verifier(format=...) takes the two formats only; anything else fails at once."""
    for bad in ("cloudevent", "json", "", None):
        with pytest.raises(ValueError, match="format must be"):
            receive.Verifier(SECRET, format=bad)  # type: ignore[arg-type]
    assert "cloudevents" in repr(receive.Verifier(SECRET, format="cloudevents"))


@pytest.mark.parametrize("stamp", ["9" * 400, "1" * 5000, "1" * 13, "0" * 13,
                                   "+1714564800", "-1714564800", "1714564800.0",
                                   "\u0661\u0667\u0661\u0664", "1_714_564_800", ""])
def test_a_timestamp_that_is_no_short_decimal_is_invalid_signature(stamp: str) -> None:
    """A webhook-timestamp of 400 or 5,000 digits, a sign, non-ASCII digits: InvalidSignature."""
    headers, body = captured()
    with pytest.raises(receive.InvalidSignature, match="webhook-timestamp"):
        receive.Verifier(SECRET).verify({**headers, "webhook-timestamp": stamp}, body)


def test_a_twelve_digit_timestamp_is_read_as_a_time() -> None:
    """Twelve digits are a time (far away: refused by the tolerance, not by its form)."""
    headers, body = captured()
    stamp = "9" * 12
    signed = {**headers, "webhook-timestamp": stamp,
              "webhook-signature": sign(key_of(SECRET), headers["webhook-id"], int(stamp), body)}
    with pytest.raises(receive.InvalidSignature, match="in the future"):
        receive.Verifier(SECRET).verify(signed, body)
    assert receive.Verifier(SECRET).verify_at(signed, body, float(stamp))[0].key == "customer-7"


def test_a_body_above_max_body_is_refused_before_its_signature_is_checked() -> None:
    """max_body (default 5 MiB): one byte more is InvalidDelivery, even with no signature."""
    headers, body = captured()
    exact = receive.Verifier(SECRET, max_body=len(body))
    assert exact.verify(headers, body)[0].id == headers["webhook-id"]
    refused(receive.Verifier(SECRET, max_body=len(body) - 1), headers, body, "max_body")
    huge = b" " * (5 * 1024 * 1024 + 1)
    started = time.perf_counter()
    refused(receive.Verifier(SECRET), {}, huge, "more than the verifier's max_body of 5242880")
    assert time.perf_counter() - started < 0.5
    with pytest.raises(receive.InvalidSignature):  # 5 MiB exactly: read on, to the signature
        receive.Verifier(SECRET).verify({}, huge[:-1])
    for bad in (0, -1, 1.5, True, "5"):
        with pytest.raises(ValueError, match="max_body"):
            receive.Verifier(SECRET, max_body=bad)  # type: ignore[arg-type]
