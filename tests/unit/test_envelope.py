"""The wire format, checked against the Standard Webhooks and CloudEvents libraries."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from dispatcher.policy.envelope import encode
from dispatcher.policy.model import Endpoint, EventData
from outbox._shared.times import rfc3339
from outbox._shared.wire import CLOUDEVENTS_SOURCE, batch_id, sign

try:  # cloudevents 1.x
    from cloudevents.http import from_http
except ImportError:  # cloudevents 2.x keeps the 1.x API here
    from cloudevents.v1.http import from_http

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OLD_SECRET = "whsec_" + base64.b64encode(b"the previous secret, 32 bytes!!!").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"someone else's secret, 32 bytes").decode()
# Spacing and number spelling that json.dumps would not reproduce.
PAYLOAD = '{"b": [1, 2.50],  "a":"\u00e9t\u00e9"}'
CREATED = datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))


def key_of(secret: str) -> bytes:
    """The key bytes of a whsec_ secret."""
    return base64.b64decode(secret.removeprefix("whsec_"))


def event(key: str | None = "thread-7", headers: dict[str, str] | None = None,
          payload: str = PAYLOAD) -> EventData:
    """An event with a fresh id."""
    return EventData(id=uuid.uuid4(), type="mail.received", key=key, payload=payload,
                     headers=headers or {}, created_at=CREATED)


def endpoint(*secrets: str, **options: object) -> Endpoint:
    """An endpoint signing with the given secrets, newest first."""
    return Endpoint(id=1, name="workflow", url="http://127.0.0.1:9/",
                    keys=tuple(key_of(s) for s in secrets), **options)  # type: ignore[arg-type]


def as_dict(headers: list[tuple[str, str]]) -> dict[str, str]:
    """Headers as a dict, after checking that no name is sent twice."""
    names = [name.lower() for name, _ in headers]
    assert len(names) == len(set(names)), names
    return dict(headers)


def test_signature_matches_the_reference_vector() -> None:
    """sign() reproduces the Standard Webhooks test vector."""
    signature = sign(key_of(SECRET), "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                     b'{"test": 2432232314}')
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_standard_webhooks_body_has_the_envelope_and_the_payload_verbatim() -> None:
    """The body is {id, type, timestamp, key, data} with the stored payload bytes spliced in."""
    ev = event()
    headers, body = encode(endpoint(), [ev], datetime.now(UTC))
    assert as_dict(headers)["content-type"] == "application/json"
    assert body.endswith(b'"data":' + PAYLOAD.encode() + b"}")
    parsed = json.loads(body)
    assert parsed == {"id": str(ev.id), "type": "mail.received",
                      "timestamp": "2024-05-01T12:30:15.123456Z", "key": "thread-7",
                      "data": json.loads(PAYLOAD)}


def test_event_without_key_has_null_key() -> None:
    """An event published without a key says "key": null."""
    _, body = encode(endpoint(), [event(key=None)], datetime.now(UTC))
    assert json.loads(body)["key"] is None


def test_unsigned_request_has_id_and_timestamp_but_no_signature() -> None:
    """Without a secret: webhook-id is the event id, webhook-timestamp is now, no signature."""
    ev = event()
    now = datetime(2025, 1, 2, 3, 4, 5, 900000, tzinfo=UTC)
    headers = as_dict(encode(endpoint(), [ev], now)[0])
    assert headers["webhook-id"] == str(ev.id)
    assert headers["webhook-timestamp"] == str(int(now.timestamp()))
    assert "webhook-signature" not in headers


def test_signed_request_verifies_with_the_standard_webhooks_library() -> None:
    """A receiver using the standardwebhooks library accepts the request."""
    headers, body = encode(endpoint(SECRET), [event()], datetime.now(UTC))
    assert Webhook(SECRET).verify(body, as_dict(headers)) == json.loads(body)


def test_during_rotation_each_key_verifies_alone() -> None:
    """Two keys give two signatures; a receiver holding either secret accepts the request."""
    headers, body = encode(endpoint(SECRET, OLD_SECRET), [event()], datetime.now(UTC))
    as_map = as_dict(headers)
    assert len(as_map["webhook-signature"].split(" ")) == 2
    Webhook(SECRET).verify(body, as_map)
    Webhook(OLD_SECRET).verify(body, as_map)
    with pytest.raises(WebhookVerificationError):
        Webhook(OTHER_SECRET).verify(body, as_map)


def test_a_retry_keeps_its_id_and_is_signed_with_its_own_timestamp() -> None:
    """Two attempts share webhook-id; each carries and signs its own timestamp."""
    ev = event()
    now = datetime.now(UTC)
    first, body1 = encode(endpoint(SECRET), [ev], now - timedelta(seconds=30))
    second, body2 = encode(endpoint(SECRET), [ev], now)
    one, two = as_dict(first), as_dict(second)
    assert one["webhook-id"] == two["webhook-id"] == str(ev.id)
    assert body1 == body2
    assert int(two["webhook-timestamp"]) - int(one["webhook-timestamp"]) == 30
    assert one["webhook-signature"] != two["webhook-signature"]
    Webhook(SECRET).verify(body2, two)


def test_custom_headers_are_sent_and_event_headers_win() -> None:
    """Endpoint and event headers are sent; the event's value wins on the same name."""
    ep = endpoint(headers={"Authorization": "Bearer t0k3n", "X-Tenant": "default"})
    headers = as_dict(encode(ep, [event(headers={"x-tenant": "acme"})], datetime.now(UTC))[0])
    assert headers["authorization"] == "Bearer t0k3n"
    assert headers["x-tenant"] == "acme"


def test_custom_headers_never_replace_protocol_headers() -> None:
    """A custom content-type, webhook-id or ce- header does not replace the dispatcher's."""
    ep = endpoint(SECRET, format="cloudevents",
                  headers={"Content-Type": "text/plain", "webhook-id": "forged", "ce-id": "x"})
    ev = event(headers={"webhook-signature": "v1,forged", "content-length": "1"})
    headers, body = encode(ep, [ev], datetime.now(UTC))
    as_map = as_dict(headers)
    assert as_map["content-type"] == "application/json"
    assert as_map["webhook-id"] == as_map["ce-id"] == str(ev.id)
    assert "content-length" not in as_map
    Webhook(SECRET).verify(body, as_map, json_parse=False)


def test_cloudevents_binary_mode_parses_with_the_sdk() -> None:
    """The CloudEvents SDK reads id, type, source, subject, time and data from the request."""
    ev = event()
    headers, body = encode(endpoint(format="cloudevents"), [ev], datetime.now(UTC))
    assert body == PAYLOAD.encode()
    parsed = from_http(as_dict(headers), body)
    assert parsed["specversion"] == "1.0"
    assert parsed["id"] == str(ev.id)
    assert parsed["type"] == "mail.received"
    assert parsed["source"] == CLOUDEVENTS_SOURCE
    assert parsed["subject"] == "thread-7"
    assert datetime.fromisoformat(parsed["time"]) == CREATED
    assert parsed.data == json.loads(PAYLOAD)


def test_cloudevents_without_key_or_secret_has_no_subject_and_no_webhook_headers() -> None:
    """No key: no ce-subject; no secret: no webhook-* headers in CloudEvents mode."""
    headers = as_dict(encode(endpoint(format="cloudevents"), [event(key=None)],
                             datetime.now(UTC))[0])
    assert "ce-subject" not in headers
    assert not [name for name in headers if name.startswith("webhook-")]


def test_cloudevents_with_a_secret_is_signed_over_the_payload() -> None:
    """A signed CloudEvents request verifies with the standardwebhooks library."""
    ev = event()
    headers, body = encode(endpoint(SECRET, format="cloudevents"), [ev], datetime.now(UTC))
    as_map = as_dict(headers)
    assert as_map["webhook-id"] == str(ev.id)
    assert Webhook(SECRET).verify(body, as_map) == json.loads(PAYLOAD)


def test_cloudevents_subject_is_percent_encoded() -> None:
    """A key with spaces, quotes or non-ASCII reaches ce-subject percent-encoded and intact."""
    bindings = pytest.importorskip("cloudevents.core.bindings.http")
    key = 'order "7" f\u00fcr 100%'
    headers, body = encode(endpoint(format="cloudevents"), [event(key=key)], datetime.now(UTC))
    assert as_dict(headers)["ce-subject"].isascii()
    parsed = bindings.from_binary_event(bindings.HTTPMessage(headers=as_dict(headers), body=body))
    assert parsed.get_subject() == key


def test_batch_body_is_an_array_of_single_event_bodies() -> None:
    """A batch sends a JSON array whose items are the single-event bodies, in order."""
    events = [event(), event(key=None), event()]
    ep = endpoint(SECRET, max_batch=10)
    headers, body = encode(ep, events, datetime.now(UTC))
    singles = [json.loads(encode(endpoint(), [ev], datetime.now(UTC))[1]) for ev in events]
    assert Webhook(SECRET).verify(body, as_dict(headers)) == singles


def test_batch_id_is_stable_for_the_same_events_and_has_no_dot() -> None:
    """A batch's webhook-id depends only on its set of events and contains no '.'."""
    a, b, c = event(), event(), event()
    ep = endpoint(max_batch=10)
    now = datetime.now(UTC)
    first = as_dict(encode(ep, [a, b], now)[0])["webhook-id"]
    again = as_dict(encode(ep, [b, a], now + timedelta(minutes=5))[0])["webhook-id"]
    other = as_dict(encode(ep, [a, c], now)[0])["webhook-id"]
    assert first == again == batch_id([a, b])
    assert first != other
    assert first.startswith("batch_")
    assert "." not in first


def test_batching_endpoint_gets_an_array_even_for_one_event() -> None:
    """An endpoint that takes batches always receives an array."""
    _, body = encode(endpoint(max_batch=5), [event()], datetime.now(UTC))
    assert isinstance(json.loads(body), list)


def test_batch_sends_only_event_headers_shared_by_all_events() -> None:
    """In a batch, an event header is sent only when every event has it with the same value."""
    events = [event(headers={"x-tenant": "acme", "x-trace": "1"}),
              event(headers={"x-tenant": "acme", "x-trace": "2"})]
    headers = as_dict(encode(endpoint(max_batch=5), events, datetime.now(UTC))[0])
    assert headers["x-tenant"] == "acme"
    assert "x-trace" not in headers


def test_cloudevents_batch_is_an_array_of_structured_events() -> None:
    """A CloudEvents batch uses the batch content type and structured-mode events."""
    json_format = pytest.importorskip("cloudevents.core.formats.json")
    events = [event(), event(key=None)]
    ep = endpoint(SECRET, format="cloudevents", max_batch=5)
    headers, body = encode(ep, events, datetime.now(UTC))
    as_map = as_dict(headers)
    assert as_map["content-type"] == "application/cloudevents-batch+json"
    assert as_map["webhook-id"] == batch_id(events)
    Webhook(SECRET).verify(body, as_map, json_parse=False)
    items = json.loads(body)
    assert "subject" not in items[1]
    for ev, item in zip(events, items, strict=True):
        parsed = json_format.JSONFormat().read(None, json.dumps(item).encode())
        assert parsed.get_id() == str(ev.id)
        assert parsed.get_type() == "mail.received"
        assert parsed.get_source() == CLOUDEVENTS_SOURCE
        assert parsed.get_time() == CREATED
        assert parsed.get_data() == json.loads(PAYLOAD)
    assert items[0]["subject"] == "thread-7"
    assert items[0]["datacontenttype"] == "application/json"


def test_misuse_is_refused() -> None:
    """No events, or several for an endpoint without batches, is a programming error."""
    with pytest.raises(ValueError, match="at least one"):
        encode(endpoint(), [], datetime.now(UTC))
    with pytest.raises(ValueError, match="one event per request"):
        encode(endpoint(), [event(), event()], datetime.now(UTC))


def test_timestamps_are_utc_with_z() -> None:
    """created_at in any zone, or naive (taken as UTC), is written in UTC with a Z."""
    assert rfc3339(CREATED) == "2024-05-01T12:30:15.123456Z"
    assert rfc3339(datetime(2024, 5, 1, 12, 30)) == "2024-05-01T12:30:00.000000Z"


@pytest.mark.parametrize("batch", [1, 10])
def test_an_endpoint_without_trace_context_gets_no_trace_header(batch: int) -> None:
    """trace_context false: neither traceparent nor tracestate from the event, from its
    headers= or from the dispatcher's span, single or batched; its other headers go."""
    traced = EventData(id=uuid.uuid4(), type="mail.received", key=None, payload="{}",
                       headers={"tracestate": "a=b", "x-kept": "1"}, created_at=CREATED,
                       traceparent=f"00-{'ab' * 16}-{'cd' * 8}-01", tracestate="v=1")
    customer = endpoint(SECRET, trace_context=False, max_batch=batch,
                        headers={"TraceParent": f"00-{'12' * 16}-{'34' * 8}-01"})
    headers, _ = encode(customer, [traced], CREATED,
                        trace=(f"00-{'ef' * 16}-{'01' * 8}-01", "span=1"))
    shown = as_dict(headers)
    assert "traceparent" not in shown
    assert "tracestate" not in shown
    assert shown["x-kept"] == "1"
    assert "traceparent" in dict(encode(endpoint(SECRET, max_batch=batch), [traced],
                                        CREATED)[0])
