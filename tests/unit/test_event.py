"""Validation and serialisation of events (outbox._event): pure, no database."""

from __future__ import annotations

import json
import re
import time
import tracemalloc
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from datetime import time as day_time
from decimal import Decimal
from typing import Any

import pytest

import outbox
from outbox._event import MAX_PAYLOAD_BYTES, Event, build_batch, check_type, uuid7

LIMIT = MAX_PAYLOAD_BYTES


def _one(**changes: Any) -> dict[str, Any]:
    """The query parameters of one event: a good event with ``changes`` applied."""
    fields: dict[str, Any] = {"type": "mail.received", "payload": {"ok": True}, **changes}
    return build_batch([Event(**fields)]).params()


@pytest.mark.parametrize("name", ["mail.received", "com.example.order:created", "a",
                                  "billing/v2.invoice_paid", "x-y.Z9", "t" * 255])
def test_good_types_pass(name: str) -> None:
    """Dotted words of letters, digits, '_', '-', ':' and '/' are event types."""
    assert check_type(name) == name


@pytest.mark.parametrize("name", ["", "mail..received", ".mail", "mail.", "mail.*", "mail.?",
                                  "mail received", "mail.[a]", "mail\n", "mail%", "t" * 256,
                                  "é.x"])
def test_bad_types_fail(name: str) -> None:
    """Empty, malformed, globbing or overlong types are InvalidEvent."""
    with pytest.raises(outbox.InvalidEvent):
        check_type(name)


@pytest.mark.parametrize("value", [None, 42, b"mail.received", ["mail"]])
def test_type_must_be_a_string(value: object) -> None:
    """A type that is not a str is InvalidEvent, not a TypeError."""
    with pytest.raises(outbox.InvalidEvent, match="event type"):
        check_type(value)


def test_payload_is_compact_json_keeping_unicode() -> None:
    """Payloads are serialised compactly, non-ASCII kept as is, one JSON array per batch."""
    batch = build_batch([Event("a", {"text": "grüße", "n": [1, 2.5]}), Event("b", None)])
    params = batch.params()
    assert params["payloads"] == '[{"text":"grüße","n":[1,2.5]},null]'
    assert json.loads(params["headers"]) == [{}, {}]


@pytest.mark.parametrize("payload", [{1, 2}, float("nan"), {"x": float("inf")}, object(),
                                     b"bytes", {("tuple",): 1}, "\ud800"])
def test_unserialisable_payload(payload: object) -> None:
    """Sets, NaN, infinities, arbitrary objects, bytes and lone surrogates are InvalidEvent."""
    with pytest.raises(outbox.InvalidEvent, match="payload"):
        _one(payload=payload)


def test_circular_payload() -> None:
    """A payload that contains itself is InvalidEvent."""
    payload: dict[str, Any] = {}
    payload["self"] = payload
    with pytest.raises(outbox.InvalidEvent):
        _one(payload=payload)


def test_payload_size_limit_counts_utf8_bytes() -> None:
    """The 1 MiB limit applies to the serialised UTF-8 bytes, inclusive."""
    _one(payload="x" * (LIMIT - 2))  # two quotes make it exactly the limit
    with pytest.raises(outbox.PayloadTooLarge) as raised:
        _one(payload="x" * (LIMIT - 1))
    assert raised.value.size == LIMIT + 1
    assert raised.value.limit == LIMIT
    with pytest.raises(outbox.PayloadTooLarge):
        _one(payload="é" * (LIMIT // 2))  # half as many characters, two bytes each


@pytest.mark.parametrize("shape", ["many small values", "one long string", "long strings"])
def test_a_huge_payload_is_refused_before_it_is_serialised_in_full(shape: str) -> None:
    """A payload of tens of megabytes is refused past the limit without being serialised whole:
    memory stays near the limit's, not the payload's."""
    payload: object = {
        "many small values": lambda: [{"n": n, "ok": True} for n in range(1_500_000)],
        "one long string": lambda: {"file": "x" * 100_000_000},
        "long strings": lambda: [f"{n:09d}" * 1000 for n in range(10_000)],
    }[shape]()
    started = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(outbox.PayloadTooLarge) as raised:
            _one(payload=payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert raised.value.size > LIMIT
    assert peak < 50 * 1024 * 1024, peak
    assert time.monotonic() - started < 30  # liveness only: it stops near the limit


def test_a_payload_holding_itself_deep_down_is_invalid_not_too_large() -> None:
    """A cycle below many values is refused as not JSON-serializable, as json refuses it,
    not as a payload over the limit."""
    inner: dict[str, Any] = {"values": list(range(600))}
    payload = {"rows": [inner] * 3}
    inner["again"] = payload
    with pytest.raises(outbox.InvalidEvent, match="Circular reference"):
        _one(payload=payload)


def test_payloads_near_the_limit_encode_alike_on_either_path() -> None:
    """A payload the quick size bound cannot vouch for is encoded piece by piece, to the
    same text and the same limit as the one-shot encoder's."""
    many = [{"n": n, "é": [1.5, None, "\u2028"]} for n in range(2_000)]
    event = _one(payload=many)
    assert event["payloads"] == "[" + json.dumps(many, ensure_ascii=False,
                                                 separators=(",", ":")) + "]"
    # Exactly at the limit and one past it, on the piece-by-piece path (many values).
    filler = ["x" * 98] * ((LIMIT - 2) // 101)
    used = 2 + len(filler) * 101 - 1
    _one(payload=[*filler, "y" * (LIMIT - used - 3)])
    with pytest.raises(outbox.PayloadTooLarge):
        _one(payload=[*filler, "y" * (LIMIT - used - 2)])


@pytest.mark.parametrize("key", ["", 7, "k" * 256, "a\nb", b"k", "lone \udc80"])
def test_bad_key(key: object) -> None:
    """Keys are non-empty strings of at most 255 characters without control characters."""
    with pytest.raises(outbox.InvalidEvent, match="key"):
        _one(key=key)


@pytest.mark.parametrize("key", ["", 42, "k" * 256, "a\x00b"])
def test_bad_idempotency_key(key: object) -> None:
    """Idempotency keys follow the same rules as keys."""
    with pytest.raises(outbox.InvalidEvent, match="idempotency_key"):
        _one(idempotency_key=key)


@pytest.mark.parametrize("headers", [
    [("x-a", "1")], "x-a: 1", {"bad name": "v"}, {"": "v"}, {"x-ä": "v"}, {1: "v"},
    {"x-a": 1}, {"x-a": None}, {"x-a": "a\r\nb"}, {"x-a": "a\nb"}, {"x-a": "a\x00"},
    {"content-type": "text/plain"}, {"Content-Length": "1"}, {"Host": "evil"},
    {"Webhook-Id": "x"}, {"webhook-signature": "v1,x"}, {"ce-type": "x"},
    {"Transfer-Encoding": "chunked"}, {"X-A": "1", "x-a": "2"}, {"x-a": "v" * 8193},
    {"x-a": "lone \ud800"}, {"x-a": "café"}, {"x-a": "a\u00a0b"}, {"x-a": "✓"},
    {"x-a": "a\x7f"}, {"x-a": "\u2028"},
])
def test_bad_headers(headers: object) -> None:
    """Headers must be a mapping of valid, unreserved names to single-line strings."""
    with pytest.raises(outbox.InvalidEvent, match="header"):
        _one(headers=headers)


def test_good_headers_are_lowercased() -> None:
    """Header names are stored lowercased; tabs, spaces and ASCII punctuation are fine."""
    printable = "".join(map(chr, range(0x20, 0x7F)))
    params = _one(headers={"X-Tenant": "acme", "x-note": "a\tb", "x-all": printable})
    assert json.loads(params["headers"]) == [
        {"x-tenant": "acme", "x-note": "a\tb", "x-all": printable}]
    assert json.loads(_one(headers={})["headers"]) == [{}]


def test_non_ascii_header_value_is_refused_without_echoing_it() -> None:
    """A non-ASCII value names its character and position, never the value (a credential)."""
    with pytest.raises(outbox.InvalidEvent, match=r"printable ASCII.*character 9 is U\+00E9") \
            as info:
        _one(headers={"Authorization": "Bearer sécret-token"})
    assert "'Authorization'" in str(info.value)
    assert "cret-token" not in str(info.value)


@pytest.mark.parametrize("delay", [timedelta(seconds=-1), -1, "30s", float("nan"),
                                   timedelta(days=100_000), float("inf"), 10**400, -(10**400)])
def test_bad_delay(delay: object) -> None:
    """Delays are non-negative timedeltas of a sane size."""
    with pytest.raises(outbox.InvalidEvent, match="delay"):
        _one(delay=delay)


def test_delay_in_seconds() -> None:
    """A timedelta delay travels as seconds; none is zero."""
    assert json.loads(_one(delay=timedelta(minutes=1, milliseconds=500))["delays"]) == [60.5]
    assert json.loads(_one()["delays"]) == [0.0]


def test_publish_many_wants_events() -> None:
    """Anything but outbox.Event in a batch is InvalidEvent."""
    with pytest.raises(outbox.InvalidEvent, match=r"outbox\.Event"):
        build_batch([("mail.received", {})])  # type: ignore[list-item]


def test_validation_comes_before_the_connection() -> None:
    """Bad input is reported even when the connection argument is unusable: nothing ran."""
    with pytest.raises(outbox.InvalidEvent):
        outbox.publish(object(), "", {})
    with pytest.raises(outbox.PayloadTooLarge):
        outbox.publish_many(object(), [Event("a", "x" * LIMIT)])


def test_uuid7_layout() -> None:
    """Event ids are RFC 9562 version 7 UUIDs carrying the current Unix milliseconds."""
    before = time.time_ns() // 1_000_000
    ids = build_batch([Event("a", n) for n in range(1000)]).uuids
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == 1000
    for value in ids:
        assert value.version == 7
        assert value.variant == uuid.RFC_4122
        assert before <= value.int >> 80 <= after
    single = uuid7()
    assert single.version == 7
    assert single.int >> 80 >= after


def test_batch_ids_match_uuids() -> None:
    """The ids sent to the database are the canonical text of the ids returned."""
    batch = build_batch([Event("a", 1), Event("b", 2)])
    assert batch.ids == [str(u) for u in batch.uuids]
    assert json.loads(batch.params()["ids"]) == batch.ids


def test_everyday_payload_values_are_encoded_as_documented() -> None:
    """datetime (aware: its offset; naive: none), date, time, UUID, Decimal (its exact
    string) and tuples are written, not refused."""
    payload = {"at": datetime(2026, 12, 1, 12, 30, tzinfo=timezone(timedelta(hours=1))),
               "utc": datetime(2026, 12, 1, 11, 30, 0, 250000, tzinfo=UTC),
               "naive": datetime(2026, 1, 1, 8, 0), "day": date(2026, 1, 2),
               "opens": day_time(9, 15), "id": uuid.UUID(int=1),
               "amount": Decimal("10.50"), "tiny": Decimal("1E-30"), "pair": (1, "two")}
    [text] = json.loads(_one(payload=payload)["payloads"])
    assert text == {"at": "2026-12-01T12:30:00+01:00", "utc": "2026-12-01T11:30:00.250000+00:00",
                    "naive": "2026-01-01T08:00:00", "day": "2026-01-02", "opens": "09:15:00",
                    "id": "00000000-0000-0000-0000-000000000001", "amount": "10.50",
                    "tiny": "1E-30", "pair": [1, "two"]}


@pytest.mark.parametrize(("payload", "place"), [
    ({"items": [1, 2, {3}]}, 'payload["items"][2]'),
    ({"x": {"y": b"bytes"}}, 'payload["x"]["y"]'),
    ({"amount": Decimal("NaN")}, 'payload["amount"]'),
    ({"ratio": float("inf")}, 'payload["ratio"]'),
    ([1, object()], "payload[1]"),
])
def test_values_json_cannot_hold_are_refused_naming_their_place(payload: Any,
                                                                place: str) -> None:
    """Sets, bytes, objects, NaN and infinities (float or Decimal) raise InvalidEvent
    naming where in the payload the value is."""
    with pytest.raises(outbox.InvalidEvent, match=re.escape(f"not JSON-serializable at {place}:")):
        _one(payload=payload)
