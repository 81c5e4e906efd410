"""W3C Trace Context: the current span's, read without importing OpenTelemetry.

``publish()`` keeps the trace context of the span current when it runs
(contract v3, "Trace context"). OpenTelemetry is optional: this module never
imports it. A span can only be current once the application has imported
``opentelemetry.trace`` (that is where spans are made and made current), so
the module is looked up in ``sys.modules``: absent, there is no span, and
publishing costs one dictionary lookup. Present, its own API reads the
current span's context.

The dispatcher reads the stored text back with :func:`parse_traceparent`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

# version 00 (and any later version, read as 00 reads it), trace id, parent id, flags.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


class TraceContext(NamedTuple):
    """The two W3C headers: ``traceparent``, and ``tracestate`` (None when empty)."""

    traceparent: str
    tracestate: str | None


def parse_traceparent(value: str | None) -> tuple[str, str, int] | None:
    """(trace id, parent span id, flags) of a valid ``traceparent``, else None."""
    if not value:
        return None
    found = _TRACEPARENT.fullmatch(value.strip()[:55])
    if found is None or found.group(1) == "ff":
        return None
    trace_id, span_id = found.group(2), found.group(3)
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return trace_id, span_id, int(found.group(4), 16)


def from_headers(headers: Mapping[str, str]) -> TraceContext | None:
    """The trace context named by (lower-case) event headers, when they give a valid one."""
    traceparent = headers.get("traceparent")
    if traceparent is None or parse_traceparent(traceparent) is None:
        return None
    return TraceContext(traceparent, headers.get("tracestate") or None)


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
            state or None)
    except Exception:  # a broken or foreign tracer must never fail a publish
        return None
