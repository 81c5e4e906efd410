"""outbox.receive.Verifier: what the dispatcher sends passes, anything else is refused by name."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from dispatcher.policy.envelope import encode
from dispatcher.policy.model import Endpoint, EventData
from outbox import receive
from outbox.testing import signed_batch, signed_request

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OLD = "whsec_" + base64.b64encode(b"the previous secret, 32 bytes!!!").decode()
OTHER = "whsec_" + base64.b64encode(b"someone else's secret, 32 bytes").decode()
CREATED = datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
PAYLOAD = '{"b": [1, 2.50],  "a":"\u00e9t\u00e9"}'


def key_of(secret: str) -> bytes:
    """The key bytes of a whsec_ secret."""
    return base64.b64decode(secret.removeprefix("whsec_"))


def event(key: str | None = "thread-7", payload: str = PAYLOAD) -> EventData:
    """An event as the dispatcher holds it."""
    return EventData(id=uuid.uuid4(), type="mail.received", key=key, payload=payload,
                     headers={"x-tenant": "acme"}, created_at=CREATED)


def sent(*events: EventData, secrets: tuple[str, ...] = (SECRET,), fmt: str = "standard-webhooks",
         max_batch: int = 1, now: datetime | None = None) -> tuple[dict[str, str], bytes]:
    """What the dispatcher's own encoder sends for these events."""
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/",
                        keys=tuple(key_of(s) for s in secrets), max_batch=max_batch,
                        format=fmt)  # type: ignore[arg-type]
    headers, body = encode(endpoint, list(events), now or datetime.now(UTC))
    return dict(headers), body


def expected(ev: EventData) -> receive.Received:
    """The Received a receiver should get for ``ev``."""
    return receive.Received(id=str(ev.id), type=ev.type, key=ev.key,
                            data=json.loads(ev.payload), time=CREATED)


def refused(error: type[Exception], headers: Any, body: bytes, match: str,
            verifier: receive.Verifier | None = None) -> str:
    """The message of the error ``verify`` raises; it never holds a secret."""
    with pytest.raises(error, match=match) as caught:
        (verifier or receive.Verifier([SECRET, OLD])).verify(headers, body)
    message = str(caught.value)
    for secret in (SECRET, OLD, OTHER):
        assert secret not in message
        assert secret.removeprefix("whsec_") not in message
    return message


def test_reference_vector_verifies() -> None:
    """The Standard Webhooks test vector's signature passes (tolerance wide enough for 2021)."""
    verifier = receive.Verifier(SECRET, tolerance=timedelta(days=36500))
    headers = {"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
               "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
    with pytest.raises(receive.InvalidDelivery, match="the body: "):  # signed, but no event
        verifier.verify(headers, b'{"test": 2432232314}')
    headers["webhook-signature"] = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE" + "x="
    with pytest.raises(receive.InvalidSignature):
        verifier.verify(headers, b'{"test": 2432232314}')


@pytest.mark.parametrize("fmt", ["standard-webhooks", "cloudevents"])
@pytest.mark.parametrize("key", ["thread-7", None, "caf\u00e9 100% \"quoted\" / spaced"])
def test_single_delivery_of_either_format_reads_back(fmt: str, key: str | None) -> None:
    """One event, either format, any key: verify returns its id, type, key, data and time."""
    ev = event(key)
    headers, body = sent(ev, fmt=fmt)
    assert receive.Verifier(SECRET, format=fmt).verify(headers, body) == [expected(ev)]


@pytest.mark.parametrize("fmt", ["standard-webhooks", "cloudevents"])
def test_batch_of_either_format_reads_back_in_order(fmt: str) -> None:
    """A batch (also of one event) gives one Received per event, in the body's order."""
    events = [event("k1"), event(None), event("k\u00e9")]
    headers, body = sent(*events, fmt=fmt, max_batch=10)
    if fmt == "cloudevents":
        assert headers["content-type"] == "application/cloudevents-batch+json"
    verifier = receive.Verifier(SECRET, format=fmt)
    assert verifier.verify(headers, body) == [expected(e) for e in events]
    one = event()
    headers, body = sent(one, fmt=fmt, max_batch=10)
    assert verifier.verify(headers, body) == [expected(one)]


def test_received_time_is_aware() -> None:
    """Received.time is an aware datetime equal to the event's publish time."""
    headers, body = sent(event())
    [got] = receive.Verifier(SECRET).verify(headers, body)
    assert got.time.tzinfo is not None
    assert got.time == CREATED


def test_any_secret_passes_any_signature_during_rotation() -> None:
    """Signed with the old and new secrets, or either alone: a verifier knowing either passes."""
    ev = event()
    for signing in ((SECRET, OLD), (SECRET,), (OLD,)):
        headers, body = sent(ev, secrets=signing)
        for known in ([SECRET], [OLD], [OTHER, OLD, SECRET]):
            if set(known) & set(signing):
                assert receive.Verifier(known).verify(headers, body) == [expected(ev)]
            else:
                refused(receive.InvalidSignature, headers, body, "matches",
                        receive.Verifier(known))


def test_headers_are_read_in_any_case_from_any_mapping() -> None:
    """A plain dict in any case, Starlette's, Werkzeug's and Django's headers all work."""
    from django.http.request import HttpHeaders
    from starlette.datastructures import Headers as StarletteHeaders
    from werkzeug.datastructures import Headers as WerkzeugHeaders

    ev = event()
    headers, body = sent(ev, fmt="cloudevents")
    shouting = {name.upper(): value for name, value in headers.items()}
    titled = {name.title(): value for name, value in headers.items()}
    starlette = StarletteHeaders(raw=[(n.title().encode(), v.encode("latin-1"))
                                      for n, v in headers.items()])
    werkzeug = WerkzeugHeaders([(n.title(), v) for n, v in headers.items()])
    django = HttpHeaders({"HTTP_" + n.upper().replace("-", "_"): v for n, v in headers.items()
                          if n != "content-type"} | {"CONTENT_TYPE": headers["content-type"]})
    verifier = receive.Verifier(SECRET, format="cloudevents")
    for given in (shouting, titled, starlette, werkzeug, django):
        assert verifier.verify(given, body) == [expected(ev)]  # type: ignore[arg-type]


def test_missing_or_wrong_signatures_are_invalid_signature() -> None:
    """No signature headers, no v1 signature, a wrong one, or a tampered body: InvalidSignature."""
    headers, body = sent(event())
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        message = refused(receive.InvalidSignature,
                          {k: v for k, v in headers.items() if k != name}, body, name)
        assert "missing" in message
    refused(receive.InvalidSignature, {**headers, "webhook-signature": "v2,abc"}, body,
            "no v1 signature")
    refused(receive.InvalidSignature, {**headers, "webhook-signature": "v1,%%%"}, body,
            "no v1 signature")
    refused(receive.InvalidSignature, headers, body.replace(b"thread-7", b"thread-8"),
            "no signature in webhook-signature matches")
    refused(receive.InvalidSignature, {**headers, "webhook-id": "another"}, body, "matches")
    refused(receive.InvalidSignature, headers, body, "matches", receive.Verifier(OTHER))
    refused(receive.InvalidSignature, {**headers, "webhook-timestamp": "12.5"}, body,
            "whole seconds")


def test_timestamps_beyond_the_tolerance_are_refused_both_ways() -> None:
    """An attempt older or further in the future than the tolerance is InvalidSignature."""
    ev = event()
    verifier = receive.Verifier(SECRET, tolerance=timedelta(seconds=60))
    now = datetime.now(UTC)
    for offset in (-50, 50):
        headers, body = sent(ev, now=now + timedelta(seconds=offset))
        assert verifier.verify(headers, body) == [expected(ev)]
    headers, body = sent(ev, now=now - timedelta(seconds=120))
    refused(receive.InvalidSignature, headers, body, "old, beyond the tolerance of 60 s",
            verifier)
    headers, body = sent(ev, now=now + timedelta(seconds=120))
    refused(receive.InvalidSignature, headers, body, "in the future, beyond the tolerance",
            verifier)
    headers, body = sent(ev, now=now - timedelta(minutes=6))
    refused(receive.InvalidSignature, headers, body, "old")  # the default: five minutes


def test_verify_at_takes_the_receivers_clock() -> None:
    """verify_at judges the timestamp against the time it is given."""
    headers, body = sent(event())
    verifier = receive.Verifier(SECRET)
    later = time.time() + 3600
    with pytest.raises(receive.InvalidSignature, match="old"):
        verifier.verify_at(headers, body, later)


def _signed(headers: dict[str, str], body: bytes, **changes: str) -> tuple[dict[str, str], bytes]:
    """``headers`` with ``changes`` (underscores for dashes), re-signed over ``body``."""
    from outbox._shared.wire import sign

    headers = {**headers, **{k.replace("_", "-"): v for k, v in changes.items()}}
    stamp = int(time.time())
    headers["webhook-timestamp"] = str(stamp)
    headers["webhook-signature"] = sign(key_of(SECRET), headers["webhook-id"], stamp, body)
    return headers, body


@pytest.mark.parametrize(("body", "match"), [
    (b"not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[]", "at least one event"),
    (b"[1]", "element 1 of the batch is not a JSON object"),
    (b'"text"', "the body is not a JSON object"),
    (b'{"id": "x", "type": "t", "timestamp": "2024-05-01T00:00:00Z", "key": null}',
     "'data' is missing"),
    (b'{"id": "x", "type": 5, "timestamp": "2024-05-01T00:00:00Z", "key": null, "data": 1}',
     "'type'"),
    (b'{"id": "x", "type": "t", "timestamp": "yesterday", "key": null, "data": 1}',
     "RFC 3339"),
    (b'{"id": "x", "type": "t", "timestamp": "2024-05-01T00:00:00", "key": null, "data": 1}',
     "time zone"),
    (b'{"id": "x", "type": "t", "timestamp": "2024-05-01T00:00:00Z", "key": 7, "data": 1}',
     "'key'"),
    (b'{"id": "y", "type": "t", "timestamp": "2024-05-01T00:00:00Z", "key": null, "data": 1}',
     "differs from the signed webhook-id"),
])
def test_signed_bodies_that_are_no_delivery_are_invalid_delivery(body: bytes, match: str) -> None:
    """A correct signature over something that is no delivery: InvalidDelivery, saying what."""
    headers, _ = sent(event())
    headers, body = _signed({**headers, "webhook-id": "x"}, body)
    refused(receive.InvalidDelivery, headers, body, match)


def test_cloudevents_headers_must_agree_with_what_is_signed() -> None:
    """Binary mode: ce-id must be the signed webhook-id; missing or bad ce- headers are refused."""
    headers, body = sent(event(), fmt="cloudevents")
    ce = receive.Verifier([SECRET, OLD], format="cloudevents")
    refused(receive.InvalidDelivery, {**headers, "ce-id": "forged"}, body,
            "ce-id differs from the signed webhook-id", ce)
    for name in ("ce-type", "ce-time"):
        refused(receive.InvalidDelivery, {k: v for k, v in headers.items() if k != name}, body,
                f"the {name} header is missing", ce)
    refused(receive.InvalidDelivery, {**headers, "ce-specversion": "0.3"}, body, "1.0", ce)
    refused(receive.InvalidDelivery, {**headers, "ce-subject": "%ff"}, body, "UTF-8", ce)
    batch_headers, batch_body = sent(event(), fmt="cloudevents", max_batch=5)
    tampered = batch_body.replace(b'"specversion":"1.0"', b'"specversion":"2"')
    refused(receive.InvalidDelivery, *_signed(batch_headers, tampered), "specversion", ce)


def test_the_standardwebhooks_library_and_we_agree() -> None:
    """A delivery the dispatcher signs passes both our verifier and the standardwebhooks library."""
    headers, body = sent(event())
    assert Webhook(SECRET).verify(body, headers)["id"] == headers["webhook-id"]
    assert receive.Verifier(SECRET).verify(headers, body)[0].id == headers["webhook-id"]


def test_verifier_refuses_bad_secrets_without_showing_them() -> None:
    """No secret, one without the whsec_ prefix or not base64: ValueError that shows none."""
    for bad in ([], ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], ["whsec_!!not base64!!"], ["whsec_"]):
        with pytest.raises(ValueError) as caught:
            receive.Verifier(bad)
        assert "MfKQ9r8" not in str(caught.value)
        assert "not base64!!" not in str(caught.value)
    with pytest.raises(ValueError, match="tolerance"):
        receive.Verifier(SECRET, tolerance=timedelta(seconds=-1))
    assert "MfKQ" not in repr(receive.Verifier(SECRET))


@pytest.mark.parametrize("bad", ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!not base64!!",
                                 "whsec_"])
def test_the_signing_helpers_read_secrets_by_the_verifiers_rule(bad: str) -> None:
    """A secret the Verifier refuses, signed_request and signed_batch refuse too, alike."""
    with pytest.raises(ValueError) as verifying:
        receive.Verifier(bad)
    with pytest.raises(ValueError) as signing:
        signed_request(bad, "mail.received", {})
    with pytest.raises(ValueError) as batching:
        signed_batch([bad], signed_request(SECRET, "mail.received", {}).events)
    assert str(verifying.value) == str(signing.value) == str(batching.value)


@pytest.mark.parametrize("fmt", ["standard-webhooks", "cloudevents"])
def test_signed_request_is_what_the_dispatcher_sends(fmt: str) -> None:
    """outbox.testing.signed_request gives the dispatcher's headers and body, byte for byte."""
    ev = event("k/\u00e9 1%")
    payload = json.loads(ev.payload)
    stamp = datetime.now(UTC).replace(microsecond=0)
    ours = signed_request([SECRET, OLD], ev.type, payload, key=ev.key, event_id=ev.id,
                          time=CREATED, format=fmt,  # type: ignore[arg-type]
                          timestamp=stamp, headers=ev.headers)
    theirs = sent(EventData(id=ev.id, type=ev.type, key=ev.key,
                            payload=json.dumps(payload, ensure_ascii=False,
                                               separators=(",", ":")),
                            headers=ev.headers, created_at=CREATED),
                  secrets=(SECRET, OLD), fmt=fmt, now=stamp)
    assert (ours.headers, ours.body) == theirs
    assert receive.Verifier(OLD, format=fmt).verify(  # type: ignore[arg-type]
        ours.headers, ours.body) == ours.events
    batch = signed_batch(SECRET, ours.events * 2, format=fmt)  # type: ignore[arg-type]
    assert receive.Verifier(SECRET, format=fmt).verify(  # type: ignore[arg-type]
        batch.headers, batch.body) == batch.events
    old = signed_request(SECRET, "t", 1, timestamp=time.time() - 600)
    with pytest.raises(receive.InvalidSignature, match="old"):
        receive.Verifier(SECRET).verify(old.headers, old.body)
