"""W3C trace context: what publish() keeps, what the wire sends, read without OpenTelemetry."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from outbox._event import Event, build_batch
from outbox._shared.tracecontext import (
    MAX_TRACESTATE,
    TraceContext,
    bounded_tracestate,
    from_headers,
    parse_traceparent,
)
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
    (f"{VALID}junk", None), (f"{VALID}-", None), (f"{VALID}-00", None), (f"{VALID} ", None),
    (f" {VALID}", None), (f"{VALID}\n", None), (VALID[:-1], None),
    (f"00-{'ab' * 16}-{'cd' * 8}-1", None), (f"00-{'ab' * 16}-{'cd' * 8}-0g", None),
    (f"00_{'ab' * 16}-{'cd' * 8}-01", None), (f"0-{'ab' * 16}-{'cd' * 8}-01", None),
    (f"01-{'ab' * 16}-{'cd' * 8}-01", ("ab" * 16, "cd" * 8, 1)),
    (f"cc-{'ab' * 16}-{'cd' * 8}-01-", ("ab" * 16, "cd" * 8, 1)),
    (f"01-{'ab' * 16}-{'cd' * 8}-01junk", None), (f"01-{'ab' * 16}-{'cd' * 8}-01-\x00", None),
    (f"01-{'ab' * 16}-{'cd' * 8}", None),
])
def test_parse_traceparent(value: str | None, parsed: tuple[str, str, int] | None) -> None:
    """Only a traceparent of exactly the W3C form names a trace: no junk after a valid start."""
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


def _members(count: int, size: int, prefix: str = "v") -> list[str]:
    """``count`` tracestate list-members of ``size`` characters each, keys numbered."""
    return [f"{prefix}{n:02d}=" + "x" * (size - len(prefix) - 3) for n in range(count)]


def test_a_tracestate_that_fits_is_kept_as_it_is() -> None:
    """512 characters or fewer: unchanged, spaces and all; empty is none."""
    exact = ",".join(_members(7, 64)) + ",k=" + "y" * 55
    assert len(exact) == MAX_TRACESTATE == 512
    assert bounded_tracestate(exact) == exact
    assert bounded_tracestate("a=b , c=d") == "a=b , c=d"
    assert bounded_tracestate("") is None
    assert bounded_tracestate(None) is None


def test_a_long_tracestate_loses_whole_members_from_the_right() -> None:
    """8 KB (32 members of 256): cut to 512 characters of whole members, the leftmost kept."""
    members = _members(32, 256)
    value = ",".join(members)
    assert len(value) > 8000
    cut = bounded_tracestate(value)
    assert cut is not None
    assert len(cut) <= MAX_TRACESTATE
    assert cut.split(",") == members[:len(cut.split(","))]  # members dropped, never cut
    short = _members(40, 20)  # 40 short members, 839 characters
    cut = bounded_tracestate(",".join(short))
    assert cut == ",".join(short[:24])  # as many as fit, from the left


def test_long_members_go_before_the_rightmost_short_ones() -> None:
    """W3C: members longer than 128 characters are dropped first, then from the right."""
    long, short = _members(3, 200, "l"), _members(10, 30, "s")
    value = ",".join([long[0], *short[:5], long[1], *short[5:], long[2]])
    cut = bounded_tracestate(value)
    assert cut == ",".join([long[0], *short])  # 510 characters: two long ones left out
    assert bounded_tracestate(",,".join(short) + "," + "x" * 600) == ",".join(short)
    assert bounded_tracestate("k=" + "v" * 600) is None  # nothing fits: no tracestate


def test_the_wire_cuts_a_stored_tracestate_and_leaves_it_out_when_told() -> None:
    """A long stored tracestate goes out cut; send_tracestate=False sends traceparent alone."""
    value = ",".join(_members(32, 256))
    sent = _sent([_Event(traceparent=VALID, tracestate=value)])
    assert sent["tracestate"] == bounded_tracestate(value)
    bare = _sent([_Event(traceparent=VALID, tracestate="a=b")], send_tracestate=False)
    assert bare["traceparent"] == VALID
    assert "tracestate" not in bare
    custom = {"traceparent": VALID, "tracestate": value}
    sent = _sent([_Event(headers=custom, traceparent=VALID, tracestate=value)])
    assert (sent["traceparent"], sent["tracestate"]) == (VALID, bounded_tracestate(value))
    bare = _sent([_Event(headers=custom)], send_tracestate=False,
                 trace=(VALID, "a=b"))
    assert bare["traceparent"] == VALID
    assert "tracestate" not in bare
