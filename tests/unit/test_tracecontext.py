"""W3C trace context: what publish() keeps, what the wire sends, read without OpenTelemetry."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from outbox._event import Event, build_batch
from outbox._shared.tracecontext import TraceContext, from_headers, parse_traceparent
from outbox._shared.wire import encode_request

VALID = f"00-{'ab' * 16}-{'cd' * 8}-01"


@pytest.mark.parametrize(("value", "parsed"), [
    (VALID, ("ab" * 16, "cd" * 8, 1)),
    (f"01-{'ab' * 16}-{'cd' * 8}-00-future", ("ab" * 16, "cd" * 8, 0)),
    (f"ff-{'ab' * 16}-{'cd' * 8}-01", None),
    (f"00-{'0' * 32}-{'cd' * 8}-01", None),
    (f"00-{'ab' * 16}-{'0' * 16}-01", None),
    (f"00-{'AB' * 16}-{'cd' * 8}-01", None),
    ("", None), (None, None), ("garbage", None),
])
def test_parse_traceparent(value: str | None, parsed: tuple[str, str, int] | None) -> None:
    """Only a valid traceparent names a trace."""
    assert parse_traceparent(value) == parsed


def test_headers_give_a_trace_context_only_when_valid() -> None:
    """A valid traceparent header (with its tracestate) is a trace context; others are not."""
    assert from_headers({"traceparent": VALID, "tracestate": "a=b"}) == TraceContext(VALID, "a=b")
    assert from_headers({"traceparent": VALID, "tracestate": ""}) == TraceContext(VALID, None)
    assert from_headers({"traceparent": "nope"}) is None
    assert from_headers({}) is None


def test_batch_keeps_the_given_trace_and_headers_win() -> None:
    """build_batch gives each event the call's trace context unless its headers name one."""
    current = TraceContext(f"00-{'11' * 16}-{'22' * 8}-01", "x=y")
    batch = build_batch([Event("a", 1), Event("b", 2, headers={"TraceParent": VALID})],
                        trace=current)
    assert batch.traceparents == [current.traceparent, VALID]
    assert batch.tracestates == ["x=y", None]
    assert build_batch([Event("a", 1)]).params()["traceparents"] == "[null]"


@dataclass(frozen=True)
class _Event:
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    type: str = "t"
    key: str | None = None
    payload: str = "{}"
    headers: dict[str, str] = field(default_factory=dict)
    created_at: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    traceparent: str | None = None
    tracestate: str | None = None


def _sent(events: list[_Event], **options: object) -> dict[str, str]:
    headers, _ = encode_request(events, datetime.now(UTC), **options)  # type: ignore[arg-type]
    return dict(headers)


def test_wire_sends_the_events_trace_context() -> None:
    """A delivery carries traceparent, and tracestate only when not empty."""
    assert _sent([_Event(traceparent=VALID, tracestate="a=b")])["tracestate"] == "a=b"
    sent = _sent([_Event(traceparent=VALID)])
    assert sent["traceparent"] == VALID
    assert "tracestate" not in sent
    assert "traceparent" not in _sent([_Event()])


def test_batch_sends_its_first_traced_events_context() -> None:
    """A batch carries the trace context of its first event that has one."""
    other = f"00-{'11' * 16}-{'22' * 8}-01"
    sent = _sent([_Event(), _Event(traceparent=VALID), _Event(traceparent=other)],
                 batched=True)
    assert sent["traceparent"] == VALID


def test_custom_traceparent_wins_and_an_override_replaces() -> None:
    """An event's own traceparent header wins; the dispatcher's span context replaces the
    stored one."""
    given = f"00-{'11' * 16}-{'22' * 8}-01"
    assert _sent([_Event(traceparent=VALID, headers={"traceparent": given})])[
        "traceparent"] == given
    assert _sent([_Event(traceparent=VALID)], trace=(given, None))["traceparent"] == given
