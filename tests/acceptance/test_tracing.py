"""One trace from publish() to the endpoint: the real dispatcher, its spans, a real receiver."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import outbox
from outbox.testing import Receiver
from outbox.testing._receiver import Response
from tests.support.dispatcher import Dispatcher, add_endpoint, run_once, wait_for_state
from tests.support.tracing import CONSOLE, console_spans, hex_ids, tracer

trace = pytest.importorskip("opentelemetry.trace")


def _attempts(log: str, endpoint: str) -> list[dict[str, Any]]:
    return [span for span in console_spans(log) if span["name"] == f"send {endpoint}"]


def test_delivery_carries_the_publishers_trace_without_sdk(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """Without tracing configured, the request carries the stored traceparent and tracestate."""
    add_endpoint(conn, "hook", receiver.url)
    given = f"00-{'ab' * 16}-{'cd' * 8}-01"
    with tracer.start_as_current_span("request") as span:
        traced = outbox.publish(conn, "order.created", {"n": 1}, key="k")
    outbox.publish(conn, "order.created", {"n": 2}, key="k",
                   headers={"traceparent": given, "tracestate": "a=b"})
    outbox.publish(conn, "order.created", {"n": 3}, key="k")
    conn.commit()
    code, log = run_once(dsn)
    assert code == 0, log
    first, second, third = receiver.wait_for(3)
    trace_id, span_id = hex_ids(span)
    assert first.header("webhook-id") == str(traced)
    header = first.header("traceparent")
    assert header is not None
    assert header.split("-")[1:3] == [trace_id, span_id]
    assert first.header("tracestate") is None
    assert (second.header("traceparent"), second.header("tracestate")) == (given, "a=b")
    assert third.header("traceparent") is None
    assert not console_spans(log)


def _number(request: Any) -> int:
    """The "n" of the event a request delivers."""
    return int(json.loads(request.body)["data"]["n"])


def test_an_endpoint_without_tracestate_gets_traceparent_alone(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """send_tracestate false: traceparent, no tracestate; another endpoint gets both, cut."""
    members = [(f"vendor{n:02d}", "x" * 245) for n in range(32)]  # 8,159 characters
    context = trace.SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(1),
                                trace_state=trace.TraceState(members))
    with Receiver() as bare:
        add_endpoint(conn, "full", receiver.url)
        add_endpoint(conn, "bare", bare.url, send_tracestate=False)
        with trace.use_span(trace.NonRecordingSpan(context)):
            outbox.publish(conn, "order.created", {"n": 1})
        outbox.publish(conn, "order.created", {"n": 2}, headers={
            "traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01", "tracestate": "a=b"})
        conn.commit()
        code, log = run_once(dsn)
        assert code == 0, log
        sent = sorted(bare.wait_for(2), key=_number)
    full = sorted(receiver.wait_for(2), key=_number)
    parent = f"00-{0x1234:032x}-{0x5678:016x}-01"
    assert [r.header("traceparent") for r in sent] == [parent, f"00-{'ab' * 16}-{'cd' * 8}-01"]
    assert [r.header("tracestate") for r in sent] == [None, None]
    state = full[0].header("tracestate")
    assert state is not None
    assert 0 < len(state) <= 512
    assert state.split(",") == [f"{k}={v}" for k, v in members][:state.count(",") + 1]
    assert full[1].header("tracestate") == "a=b"


@pytest.mark.parametrize("env", [None, CONSOLE], ids=["no SDK", "SDK"])
def test_an_endpoint_without_trace_context_gets_neither_header(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver,
        env: dict[str, str] | None) -> None:
    """trace_context false: neither traceparent nor tracestate, whatever span publish() ran
    in, a traceparent in the event's headers and the dispatcher's own attempt span included;
    another endpoint of the same events gets both."""
    context = trace.SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(1),
                                trace_state=trace.TraceState([("vendor", "v")]))
    with Receiver() as customer:
        add_endpoint(conn, "internal", receiver.url)
        add_endpoint(conn, "customer", customer.url, trace_context=False)
        with trace.use_span(trace.NonRecordingSpan(context)):
            outbox.publish(conn, "order.created", {"n": 1})
        outbox.publish(conn, "order.created", {"n": 2}, headers={
            "traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01", "tracestate": "a=b"})
        conn.commit()
        code, log = run_once(dsn, env=env)
        assert code == 0, log
        sent = sorted(customer.wait_for(2), key=_number)
    internal = sorted(receiver.wait_for(2), key=_number)
    assert [(r.header("traceparent"), r.header("tracestate")) for r in sent] == [(None, None)] * 2
    assert all(r.header("traceparent") is not None for r in internal)
    assert internal[1].header("tracestate") == "a=b"


def test_attempts_are_client_spans_in_the_publishers_trace(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """Each attempt is a CLIENT span, child of the publisher's span, ended with its outcome;
    the receiver reads the attempt span's own context from traceparent."""
    answers = iter([500, 200])
    receiver.responder = lambda _: Response(next(answers))
    add_endpoint(conn, "hook", receiver.url)
    with tracer.start_as_current_span("request") as span:
        event_id = outbox.publish(conn, "order.created", {"n": 1})
    conn.commit()
    with Dispatcher(dsn, env=CONSOLE) as dispatcher:
        wait_for_state(conn, event_id, "delivered", dispatcher=dispatcher)
        assert dispatcher.stop() == 0  # spans are flushed at exit
        log = dispatcher.log()
    failed, succeeded = receiver.wait_for(2)
    trace_id, span_id = hex_ids(span)
    spans = _attempts(log, "hook")
    assert len(spans) == 2, log
    for number, (attempt, request, status) in enumerate(
            [(spans[0], failed, 500), (spans[1], succeeded, 200)], start=1):
        assert attempt["kind"] == "SpanKind.CLIENT"
        assert attempt["context"]["trace_id"] == f"0x{trace_id}"
        assert attempt["parent_id"] == f"0x{span_id}"
        attributes = attempt["attributes"]
        assert attributes["messaging.system"] == "outbox"
        assert attributes["messaging.message.id"] == str(event_id)
        assert attributes["messaging.destination.name"] == "hook"
        assert attributes["http.response.status_code"] == status
        assert attributes["outbox.attempt"] == number
        header = request.header("traceparent")
        assert header is not None
        assert header.split("-")[1:3] == [trace_id, attempt["context"]["span_id"][2:]]
    assert spans[0]["status"]["status_code"] == "ERROR"
    assert spans[1]["status"]["status_code"] == "UNSET"
    assert spans[0]["resource"]["attributes"]["service.name"] == "dispatcher-under-test"


def test_unanswered_attempt_span_has_no_status_code(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """An attempt that got no answer ends in error, without http.response.status_code."""
    with Receiver() as gone:
        url = gone.url
    add_endpoint(conn, "hook", url, max_attempts=1)
    with tracer.start_as_current_span("request"):
        outbox.publish(conn, "order.created", {})
    conn.commit()
    code, log = run_once(dsn, env=CONSOLE)
    assert code == 1, log
    [attempt] = _attempts(log, "hook")
    assert attempt["status"]["status_code"] == "ERROR"
    assert "http.response.status_code" not in attempt["attributes"]
    assert attempt["attributes"]["error.type"] == "connect"


def test_batch_follows_its_first_traced_event_and_links_the_others(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """A batch request carries its first traced event's trace; its span links the others."""
    add_endpoint(conn, "batch", receiver.url, max_batch=10)
    spans = []
    with conn.transaction():  # one publish time: the batch goes in publish order
        outbox.publish(conn, "order.created", {"n": 0})  # untraced, first
        for n in (1, 2):
            with tracer.start_as_current_span(f"request {n}") as span:
                outbox.publish(conn, "order.created", {"n": n})
            spans.append(span)
    conn.commit()
    code, log = run_once(dsn, env=CONSOLE)
    assert code == 0, log
    [request] = receiver.wait_for(1)
    (first_trace, first_span), (second_trace, second_span) = map(hex_ids, spans)
    [attempt] = _attempts(log, "batch")
    assert attempt["context"]["trace_id"] == f"0x{first_trace}"
    assert attempt["parent_id"] == f"0x{first_span}"
    assert [(link["context"]["trace_id"], link["context"]["span_id"])
            for link in attempt["links"]] == [(f"0x{second_trace}", f"0x{second_span}")]
    assert attempt["attributes"]["messaging.batch.message_count"] == 3
    header = request.header("traceparent")
    assert header is not None
    assert header.split("-")[1] == first_trace




def test_untraced_event_gets_a_root_span_and_no_header(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """With the SDK on, an event published outside any span gets a span of its own, and its
    request carries no traceparent."""
    add_endpoint(conn, "hook", receiver.url)
    outbox.publish(conn, "order.created", {})
    conn.commit()
    code, log = run_once(dsn, env=CONSOLE)
    assert code == 0, log
    [request] = receiver.wait_for(1)
    assert request.header("traceparent") is None
    [attempt] = _attempts(log, "hook")
    assert attempt["parent_id"] is None
