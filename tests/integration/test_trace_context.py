"""publish() keeps the current span's W3C trace context with the event."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from typing import Any

import psycopg
import pytest

import outbox
from tests.support.publishing import add_endpoint, committed
from tests.support.tracing import traceparent_of, tracer

trace = pytest.importorskip("opentelemetry.trace")


def _stored(dsn: str, event_id: uuid.UUID) -> tuple[str | None, str | None]:
    [row] = committed(dsn, "SELECT traceparent, tracestate FROM outbox.events WHERE id = %s",
                      (event_id,))
    return row[0], row[1]


def test_no_current_span_stores_nothing(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Without a current span the event has no trace context."""
    add_endpoint(conn, "all")
    event_id = outbox.publish(conn, "order.created", {})
    conn.commit()
    assert _stored(dsn, event_id) == (None, None)


def test_publish_in_a_span_keeps_its_context(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """The event keeps the traceparent of the span current at publish()."""
    add_endpoint(conn, "all")
    with tracer.start_as_current_span("request") as span:
        event_id = outbox.publish(conn, "order.created", {})
    conn.commit()
    assert _stored(dsn, event_id) == (traceparent_of(span), None)


def test_tracestate_is_kept(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A span's non-empty tracestate is kept beside its traceparent."""
    context = trace.SpanContext(0x1234, 0x5678, is_remote=True,
                                trace_flags=trace.TraceFlags(1),
                                trace_state=trace.TraceState([("vendor", "value")]))
    with trace.use_span(trace.NonRecordingSpan(context)):
        event_id = outbox.publish(conn, "order.created", {})
    conn.commit()
    assert _stored(dsn, event_id) == (f"00-{0x1234:032x}-{0x5678:016x}-01", "vendor=value")


def test_invalid_span_stores_nothing(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """The invalid span OpenTelemetry reports outside any span is no trace context."""
    with trace.use_span(trace.INVALID_SPAN):
        event_id = outbox.publish(conn, "order.created", {})
    conn.commit()
    assert _stored(dsn, event_id) == (None, None)


def test_traceparent_header_wins(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A traceparent given in headers= is the event's trace context, not the current span's."""
    given = f"00-{'ab' * 16}-{'cd' * 8}-01"
    with tracer.start_as_current_span("request"):
        event_id = outbox.publish(conn, "order.created", {},
                                  headers={"TraceParent": given, "tracestate": "k=v"})
    conn.commit()
    assert _stored(dsn, event_id) == (given, "k=v")


def test_publish_many_keeps_the_context_of_each_event(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """publish_many: every event gets the current span's context, unless its headers give one."""
    given = f"00-{'ab' * 16}-{'cd' * 8}-00"
    with tracer.start_as_current_span("request") as span:
        first, second = outbox.publish_many(conn, [
            outbox.Event("a", 1), outbox.Event("b", 2, headers={"traceparent": given})])
    conn.commit()
    assert _stored(dsn, first) == (traceparent_of(span), None)
    assert _stored(dsn, second) == (given, None)


def test_apublish_keeps_the_context(dsn: str) -> None:
    """apublish keeps the span current in its task."""
    async def publish() -> tuple[Any, uuid.UUID]:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            with tracer.start_as_current_span("request") as span:
                event_id = await outbox.apublish(aconn, "order.created", {})
            await aconn.commit()
        return span, event_id

    span, event_id = asyncio.run(publish())
    assert _stored(dsn, event_id) == (traceparent_of(span), None)


def test_publishing_imports_nothing_of_opentelemetry(dsn: str) -> None:
    """An application that never imported OpenTelemetry publishes without loading any of it."""
    script = (
        "import sys, psycopg, outbox\n"
        f"with psycopg.connect({dsn!r}) as conn:\n"
        "    outbox.publish(conn, 'order.created', {})\n"
        "    outbox.publish_many(conn, [outbox.Event('a', 1)])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("value", ["not-a-traceparent", f"00-{'0' * 32}-{'cd' * 8}-01"])
def test_malformed_traceparent_header_is_sent_but_not_kept(
        dsn: str, conn: psycopg.Connection[Any], value: str) -> None:
    """A traceparent header naming no valid trace travels as given, and is no trace context."""
    event_id = outbox.publish(conn, "order.created", {}, headers={"traceparent": value})
    conn.commit()
    assert _stored(dsn, event_id) == (None, None)
    [[headers]] = committed(dsn, "SELECT headers FROM outbox.events WHERE id = %s", (event_id,))
    assert headers == {"traceparent": value}


def test_a_long_tracestate_is_cut_at_publish(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A span with an 8 KB tracestate (32 members of 256): the event keeps 512 characters."""
    members = [(f"vendor{n:02d}", "x" * 245) for n in range(32)]  # 8,159 characters
    state = trace.TraceState(members)
    assert len(state.to_header()) > 8000
    context = trace.SpanContext(0x1234, 0x5678, is_remote=True,
                                trace_flags=trace.TraceFlags(1), trace_state=state)
    with trace.use_span(trace.NonRecordingSpan(context)):
        from_span = outbox.publish(conn, "order.created", {})
    from_headers = outbox.publish(conn, "order.created", {}, headers={
        "traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01", "tracestate": state.to_header()})
    conn.commit()
    for event_id in (from_span, from_headers):
        traceparent, stored = _stored(dsn, event_id)
        assert traceparent is not None
        assert stored is not None
        assert 0 < len(stored) <= 512
        assert stored.split(",") == [f"{k}={v}" for k, v in members][:stored.count(",") + 1]
