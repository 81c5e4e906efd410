"""W3C Trace Context: the current span's, read without importing OpenTelemetry.

``publish()`` keeps the trace context of the span current when it runs
(docs/production.md, "Tracing"). OpenTelemetry is optional: this module never
imports it. A span can only be current once the application has imported
``opentelemetry.trace`` (that is where spans are made and made current), so
the module is looked up in ``sys.modules``: absent, there is no span, and
publishing costs one dictionary lookup. Present, its own API reads the
current span's context.

The dispatcher reads the stored text back with :func:`parse_traceparent`. A
``tracestate`` is kept and sent within :data:`MAX_TRACESTATE` characters.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

# Version, trace id, parent id, flags; then, in a version after 00 only, more
# fields after a dash (W3C Trace Context, "Versioning of traceparent": a later
# version is read as 00 reads it, its first 55 characters followed by the end or
# a dash). Visible ASCII only: anything else cannot travel as a header.
_TRACEPARENT = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
MAX_TRACESTATE = 512
"""Characters of ``tracestate`` kept at publish and sent: W3C asks to propagate at least
this much. A longer one (an incoming request's, up to 32 members of 256 characters and
more) is cut as :func:`bounded_tracestate` says, so that it fills neither the row nor
every request of every endpoint."""
_LONG_MEMBER = 128  # W3C: entries longer than this are dropped first
_MAX_MEMBERS = 32


class TraceContext(NamedTuple):
    """The two W3C headers: ``traceparent``, and ``tracestate`` (None when empty)."""

    traceparent: str
    tracestate: str | None


def parse_traceparent(value: str | None) -> tuple[str, str, int] | None:
    """(trace id, parent span id, flags) of a valid ``traceparent``, else None.

    Exactly the W3C form: version ``00`` is 55 characters, no more; ``ff`` is
    invalid; a later version may carry more after a dash. A valid beginning
    followed by anything else is no traceparent.
    """
    if not value:
        return None
    found = _TRACEPARENT.fullmatch(value)
    if found is None or found.group(1) == "ff" or (found.group(1) == "00" and found.group(5)):
        return None
    trace_id, span_id = found.group(2), found.group(3)
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return trace_id, span_id, int(found.group(4), 16)


def bounded_tracestate(value: str | None) -> str | None:
    """``value`` within MAX_TRACESTATE characters, cut by W3C's rules; None when empty.

    W3C Trace Context ("tracestate Limits"): whole list-members are dropped,
    never cut, those longer than 128 characters first, then from the right
    end (the left holds the most recent vendors); a list holds 32 members at
    most. A value that fits is kept as it is.
    """
    if not value:
        return None
    if len(value) <= MAX_TRACESTATE:
        return value
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member][:_MAX_MEMBERS]

    def size() -> int:
        return sum(map(len, members)) + len(members) - 1

    while members and size() > MAX_TRACESTATE:
        long = [n for n, member in enumerate(members) if len(member) > _LONG_MEMBER]
        members.pop(long[-1] if long else -1)
    return ",".join(members) or None


def from_headers(headers: Mapping[str, str]) -> TraceContext | None:
    """The trace context named by (lower-case) event headers, when they give a valid one."""
    traceparent = headers.get("traceparent")
    if traceparent is None or parse_traceparent(traceparent) is None:
        return None
    return TraceContext(traceparent, bounded_tracestate(headers.get("tracestate")))


def current() -> TraceContext | None:
    """The current span's trace context, or None (no OpenTelemetry, no valid span)."""
    trace: Any = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    try:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        state = context.trace_state.to_header() if context.trace_state else ""
        return TraceContext(
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}",
            bounded_tracestate(state))
    except Exception:  # a broken or foreign tracer must never fail a publish
        return None
