"""publish / publish_many over generated arguments, valid and not, against a real PostgreSQL.

The promise (docs/concepts.md, "Publishing, in detail"): bad input raises ``InvalidEvent`` or
``PayloadTooLarge`` before any SQL runs, so the caller's transaction goes on
and can still commit; good input is stored as given, the payload byte for
byte. Whatever a producer passes, nothing else may come out: not a driver
error, not a ``TypeError`` or ``OverflowError`` from deep inside, and never
a half-written batch.

Each call draws a few of its arguments (often none) from odd values and the
rest from values the documented rules make valid; a call with no odd argument
must succeed, so the checks cannot pass by refusing everything. One connection serves all
examples of a test; each example ends in a rollback (or, after a refusal,
in a commit that must hold the caller's own row and no event).
"""

from __future__ import annotations

import json
import string
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import outbox
from outbox._event import MAX_PAYLOAD_BYTES
from outbox._shared.headers import MAX_VALUE, RESERVED
from tests.support.publishing import add_endpoint
from tests.support.strategies import any_text

Conn = psycopg.Connection[Any]

# Each example is a few statements on a real database; the 1 MiB payloads
# near the limit cost most. Enough examples to meet every kind of input.
DATABASE = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

_MAX_TEXT = 255
_MAX_DELAY = timedelta(days=3660)


# Any code point, control characters and lone surrogates included.
ANY_TEXT = any_text(max_size=300)
# What a key may hold: anything but control characters and lone surrogates.
KEY_CHAR = st.characters(exclude_categories=("Cc", "Cs"))
HASHABLE_NOT_STR = st.one_of(st.integers(), st.floats(), st.binary(max_size=8),
                             st.builds(object))
NOT_STR = st.one_of(HASHABLE_NOT_STR, st.lists(st.text(max_size=3), max_size=2))
# Far over any limit; drawn by length so that reports do not print a megabyte.
HUGE_TEXT = st.integers(10**5, 10**6).map(lambda size: "x" * size)


@dataclass(frozen=True)
class Field:
    """How to draw one argument: values the documented rules make valid, and others."""

    good: st.SearchStrategy[Any]
    odd: st.SearchStrategy[Any]


TYPE = Field(
    good=st.one_of(st.from_regex(r"[A-Za-z0-9_\-:/]+(\.[A-Za-z0-9_\-:/]+)*", fullmatch=True)
                   .filter(lambda t: len(t) <= _MAX_TEXT), st.just("t" * _MAX_TEXT)),
    odd=st.one_of(ANY_TEXT, NOT_STR, st.none(), st.sampled_from(
        ["", ".", "a..b", "a.", "mail.*", "é", "t" * 256, "a b"])),
)
# key= and idempotency_key=; a small pool too, so that keys repeat in a batch.
TEXT = Field(
    good=st.one_of(st.none(), st.text(KEY_CHAR, min_size=1, max_size=_MAX_TEXT),
                   st.sampled_from(["k", "K", "k" * _MAX_TEXT, "ключ", "🔑"])),
    odd=st.one_of(ANY_TEXT, NOT_STR, HUGE_TEXT, st.sampled_from(
        ["", "k" * 256, "a\x00b", "a\nb", "\x7f", "\ud800", "a\udfffb"])),
)

_TOKEN = st.from_regex(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,40}", fullmatch=True)
HEADER_NAMES = _TOKEN.filter(lambda n: n.lower() not in RESERVED
                             and not n.lower().startswith(("webhook-", "ce-")))
PRINTABLE = st.text(st.sampled_from(string.printable[:95] + "\t"), max_size=100)
GOOD_HEADERS = st.one_of(
    st.sampled_from([None, {}]),
    st.lists(st.tuples(HEADER_NAMES, st.one_of(PRINTABLE, st.just("v" * MAX_VALUE))),
             max_size=4, unique_by=lambda pair: pair[0].lower()).map(dict))
_ODD_NAMES = st.one_of(HEADER_NAMES, ANY_TEXT, HASHABLE_NOT_STR, st.sampled_from(
    [*sorted(RESERVED), "Content-Type", "webhook-id", "CE-Id", "Host"]))
_ODD_VALUES = st.one_of(PRINTABLE, ANY_TEXT, NOT_STR, HUGE_TEXT, st.sampled_from(
    ["clé", "a\r\nx-evil: 1", "\u00a0", "v" * (MAX_VALUE + 1)]))
HEADERS = Field(
    good=GOOD_HEADERS,
    odd=st.one_of(
        st.builds(lambda good, odd: (good or {}) | odd, GOOD_HEADERS,
                  st.dictionaries(_ODD_NAMES, _ODD_VALUES, min_size=1, max_size=3)),
        st.lists(st.tuples(_TOKEN, PRINTABLE), max_size=2), st.text(max_size=5), st.integers()),
)

DELAY = Field(
    good=st.one_of(st.none(), st.timedeltas(min_value=timedelta(0), max_value=_MAX_DELAY),
                   st.sampled_from([timedelta(0), _MAX_DELAY, timedelta(microseconds=1)])),
    odd=st.one_of(st.timedeltas(), st.integers(), st.floats(),
                  st.sampled_from([True, "30", -1e-300, 5e-324, float("nan")]),
                  st.integers(309, 400).map(lambda digits: 10**digits)),  # beyond any float
)

JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(),
                        st.floats(allow_nan=False, allow_infinity=False),
                        st.text(st.characters(exclude_categories=("Cs",)), max_size=20))
JSON = st.recursive(JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)
ODD_LEAVES = st.one_of(
    JSON_LEAVES, st.floats(), ANY_TEXT, st.binary(max_size=4), st.builds(object),
    st.frozensets(st.integers(), max_size=2), st.tuples(st.integers()),
    st.sampled_from([float("nan"), "\udfff", "\x00"]),
    st.integers(4300, 4400).map(lambda digits: 10**digits))  # too long to print as text
ODD_JSON = st.recursive(ODD_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=8), st.integers(), st.floats(), st.none(),
                              st.booleans(), st.tuples(st.integers()), ANY_TEXT),
                    inner, max_size=4)),
    max_leaves=20)


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def _near_limit(char: str, target: int) -> str:
    """A string of ``char`` whose JSON text is about ``target`` bytes."""
    return char * ((target - 2) // len(char.encode()))


_CHARS = st.sampled_from(["x", "é", "€", "😀"])
PAYLOAD = Field(
    good=st.one_of(JSON, st.integers(1, 300).map(_nested), st.builds(
        _near_limit, _CHARS, st.integers(MAX_PAYLOAD_BYTES - 8, MAX_PAYLOAD_BYTES))),
    odd=st.one_of(ODD_JSON, st.integers(1, 3000).map(_nested), st.builds(
        _near_limit, _CHARS, st.integers(MAX_PAYLOAD_BYTES + 1, MAX_PAYLOAD_BYTES + 8))),
)

FIELDS = {"type": TYPE, "payload": PAYLOAD, "key": TEXT, "headers": HEADERS,
          "idempotency_key": TEXT, "delay": DELAY}


@dataclass(frozen=True)
class Call:
    """One event's arguments as drawn, and whether all of them were drawn as good ones."""

    args: dict[str, Any]
    good: bool

    def kwargs(self) -> dict[str, Any]:
        return {name: self.args[name] for name in ("key", "headers", "idempotency_key", "delay")}

    def event(self) -> outbox.Event:
        return outbox.Event(self.args["type"], self.args["payload"], **self.kwargs())


@st.composite
def event_calls(draw: st.DrawFn) -> Call:
    """An event's arguments: some fields (often none) may be drawn from the odd values."""
    odd = draw(st.sets(st.sampled_from(sorted(FIELDS)), max_size=3))
    args = {name: draw(st.one_of(field.good, field.odd) if name in odd else field.good)
            for name, field in FIELDS.items()}
    return Call(args, not odd)


@pytest.fixture
def producer(conn: Conn) -> Conn:
    """The test's connection with an endpoint taking every event and a table of the caller's."""
    add_endpoint(conn, "all")
    conn.execute("CREATE TABLE app_orders (id int)")
    conn.commit()
    return conn


def _seconds(delay: Any) -> float:
    if delay is None:
        return 0.0
    return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


def _check_stored(conn: Conn, calls: list[Call], ids: list[uuid.UUID]) -> None:
    """Each id holds the first event of its idempotency key, as given; one delivery each."""
    assert len(ids) == len(calls)
    first: dict[str, uuid.UUID] = {}
    for call, event_id in zip(calls, ids, strict=True):
        key = call.args["idempotency_key"]
        if key is not None and key in first:
            assert event_id == first[key]  # a repeated key answers with the first id
            continue
        if key is not None:
            first[key] = event_id
        row = conn.execute(
            "SELECT type, key, convert_to(payload::text, 'UTF8'), headers, idempotency_key,"
            "       deliver_after - created_at FROM outbox.events WHERE id = %s",
            (event_id,)).fetchone()
        assert row is not None
        stored_type, stored_key, payload, stored_headers, idempotency_key, delay = row
        assert stored_type == call.args["type"]
        assert stored_key == call.args["key"]
        expected = json.dumps(call.args["payload"], ensure_ascii=False, allow_nan=False,
                              separators=(",", ":"))
        assert bytes(payload) == expected.encode()
        assert stored_headers == {name.lower(): value
                                  for name, value in (call.args["headers"] or {}).items()}
        assert idempotency_key == key
        assert abs(delay.total_seconds() - _seconds(call.args["delay"])) <= 1e-6
    counts = conn.execute("SELECT (SELECT count(*) FROM outbox.events),"
                          "       (SELECT count(*) FROM outbox.deliveries)").fetchone()
    assert counts == (len(set(ids)), len(set(ids)))


def _check_refused(conn: Conn) -> None:
    """After a refusal the transaction still works and commits the caller's row, no event."""
    assert conn.execute("SELECT 1").fetchone() == (1,)
    conn.commit()
    assert conn.execute("SELECT count(*) FROM app_orders").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM outbox.events").fetchone() == (0,)
    conn.execute("DELETE FROM app_orders")
    conn.commit()


@DATABASE
@given(call=event_calls())
def test_publish_stores_the_event_as_given_or_refuses_it(producer: Conn, call: Call) -> None:
    """publish() stores any valid event byte for byte, or raises InvalidEvent/PayloadTooLarge."""
    conn = producer
    conn.rollback()  # whatever an earlier, failed example left open
    conn.execute("INSERT INTO app_orders VALUES (1)")
    try:
        event_id = outbox.publish(conn, call.args["type"], call.args["payload"], **call.kwargs())
    except (outbox.InvalidEvent, outbox.PayloadTooLarge) as refused:
        event(f"refused: {type(refused).__name__}")
        assert not call.good, "a valid event was refused"
        _check_refused(conn)
        return
    event("stored")
    try:
        _check_stored(conn, [call], [event_id])
    finally:
        conn.rollback()


BATCHES = st.lists(event_calls(), max_size=4)


@DATABASE
@given(calls=BATCHES, stray=st.sampled_from([None, None, None, "not an event", 42]))
def test_publish_many_stores_the_whole_batch_or_nothing(
        producer: Conn, calls: list[Call], stray: object) -> None:
    """publish_many() stores every event as given, or refuses the batch and writes nothing."""
    conn = producer
    events: list[Any] = [call.event() for call in calls]
    if stray is not None:
        events.insert(len(events) // 2, stray)
    conn.rollback()  # whatever an earlier, failed example left open
    conn.execute("INSERT INTO app_orders VALUES (1)")
    try:
        ids = outbox.publish_many(conn, events)
    except (outbox.InvalidEvent, outbox.PayloadTooLarge) as refused:
        event(f"refused: {type(refused).__name__}")
        assert stray is not None or not all(call.good for call in calls), \
            "a valid batch was refused"
        _check_refused(conn)
        return
    event(f"stored {len(calls)} events")
    try:
        assert stray is None
        _check_stored(conn, calls, ids)
    finally:
        conn.rollback()
