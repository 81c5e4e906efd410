"""Spans for tests: a tracer of the test's own, and the spans a dispatcher printed.

The dispatcher under test exports through the SDK's console exporter
(``OTEL_TRACES_EXPORTER=console``), which prints each span as an indented
JSON object on standard output; :func:`console_spans` reads them back from
its log, where they sit between log lines.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed")

from opentelemetry.sdk.trace import TracerProvider

tracer = TracerProvider().get_tracer("tests")
"""Makes real, sampled spans; not the global provider (nothing is exported)."""

CONSOLE = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "dispatcher-under-test",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
"""A dispatcher's environment that prints its spans."""


def hex_ids(span: Any) -> tuple[str, str]:
    """(trace id, span id) of a span, as W3C writes them."""
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def traceparent_of(span: Any) -> str:
    """The W3C traceparent naming ``span`` (its flags as the SDK set them)."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def console_spans(log: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed into ``log``, in order."""
    decoder = json.JSONDecoder()
    spans, at = [], 0
    while (start := log.find("{\n", at)) >= 0:
        try:
            found, at = decoder.raw_decode(log, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(found, dict) and "context" in found and "kind" in found:
            spans.append(found)
    return spans
