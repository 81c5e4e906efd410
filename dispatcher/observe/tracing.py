"""Spans of delivery attempts, when OpenTelemetry's SDK is installed and configured.

Configuration is OpenTelemetry's own: the standard
``OTEL_TRACES_EXPORTER`` names the exporters (``console``, ``otlp``, ...,
found through the SDK's ``opentelemetry_traces_exporter`` entry points), and
the SDK reads the other ``OTEL_*`` variables itself (service name and
resource, sampler, batch processor, each exporter's endpoint). Those are the
only variables read outside ``dispatcher.cli``: they belong to the SDK, not
to our configuration. Nothing of OpenTelemetry is imported unless
``OTEL_TRACES_EXPORTER`` names an exporter.

Each attempt is a CLIENT span in the trace its event was published in (the
stored ``traceparent`` is its parent), named ``send ENDPOINT`` after the
messaging conventions, with ``messaging.*`` and ``http.*`` attributes. A
batch request's span is a child of its first traced event and links the
others. The request carries the span's own context, so the receiver's span
is its child; a request whose events have no trace context gets a span that
starts a trace of its own, and carries no ``traceparent`` (nothing is sent
for an event published outside any span).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from dispatcher.policy.model import AttemptResult, Delivery
from outbox._shared.tracecontext import parse_traceparent

log = logging.getLogger("dispatcher")


class AttemptSpan:
    """One attempt's span: its context for the request's headers, ended with the outcome."""

    __slots__ = ("_api", "_span", "trace")

    def __init__(self, api: Any, span: Any, *, propagate: bool) -> None:
        """``propagate``: the request carries the span's context (its events have a trace)."""
        self._api = api
        self._span = span
        context = span.get_span_context()
        state = context.trace_state.to_header() if context.trace_state else ""
        self.trace: tuple[str, str | None] | None = (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}",
            state or None) if propagate and context.is_valid else None

    def end(self, result: AttemptResult) -> None:
        span, status = self._span, result.status
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if status is None or not 200 <= status < 300:
            span.set_attribute("error.type", str(status) if status is not None
                               else (result.error_kind or "other"))
            span.set_status(self._api.Status(self._api.StatusCode.ERROR,
                                             result.error or f"HTTP {status}"))
        span.end()


class Tracing:
    """Makes the attempt spans; :func:`configure` builds it from OpenTelemetry's variables."""

    def __init__(self, provider: Any, version: str) -> None:
        from opentelemetry import trace

        self._provider = provider
        self._api = trace
        self._tracer = provider.get_tracer("outbox-dispatcher", version)

    def _context(self, traceparent: str | None, tracestate: str | None) -> Any:
        """The SpanContext a stored traceparent names, or None when it names none."""
        parsed = parse_traceparent(traceparent)
        if parsed is None:
            return None
        trace_id, span_id, flags = parsed
        api = self._api
        state = api.TraceState.from_header([tracestate]) if tracestate else None
        return api.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                               trace_flags=api.TraceFlags(flags & 0xFF), trace_state=state)

    def start(self, endpoint: str, deliveries: Sequence[Delivery]) -> AttemptSpan:
        """The span of one request delivering ``deliveries`` to ``endpoint``, started."""
        api = self._api
        parent, links, lead = None, [], deliveries[0]
        for delivery in deliveries:
            context = self._context(delivery.event.traceparent, delivery.event.tracestate)
            if context is None:
                continue
            if parent is None:
                parent, lead = context, delivery
            else:
                links.append(api.Link(context, {
                    "messaging.message.id": str(delivery.event.id)}))
        attributes: dict[str, Any] = {
            "messaging.system": "outbox",
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": endpoint,
            "messaging.message.id": str(lead.event.id),
            "outbox.attempt": max(d.attempts for d in deliveries),
            "http.request.method": "POST",
        }
        if len(deliveries) > 1:
            attributes["messaging.batch.message_count"] = len(deliveries)
        ctx = api.set_span_in_context(api.NonRecordingSpan(parent)) if parent else None
        span = self._tracer.start_span(f"send {endpoint}", context=ctx,
                                       kind=api.SpanKind.CLIENT, attributes=attributes,
                                       links=links)
        # Events published without a trace context get a span of their own (a new
        # trace) but, as without the SDK, no traceparent on the wire.
        return AttemptSpan(api, span, propagate=parent is not None)

    def shutdown(self) -> None:
        """Export what is buffered; called once, at the dispatcher's exit."""
        try:
            self._provider.shutdown()
        except Exception:
            log.exception("flushing the trace exporters failed")


def configure(exporters: str, version: str) -> Tracing | None:
    """Tracing with the exporters ``OTEL_TRACES_EXPORTER`` names; None when it names none,
    or when the SDK is missing (said once in the log)."""
    names = [name.strip() for name in exporters.split(",") if name.strip()]
    names = [name for name in names if name.lower() != "none"]
    if not names:
        return None
    try:
        from importlib.metadata import entry_points

        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_TRACES_EXPORTER is set, but OpenTelemetry's SDK is not installed "
                    "(pip install opentelemetry-sdk): no spans are made")
        return None
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource.create({"service.name": "outbox-dispatcher"}))
    provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER and its argument
    found = 0
    for name in names:
        points = list(entry_points(group="opentelemetry_traces_exporter", name=name))
        if not points:
            log.warning("OTEL_TRACES_EXPORTER names %r, which no installed package provides",
                        name)
            continue
        try:
            exporter = points[0].load()()
        except Exception:
            log.exception("the %r trace exporter could not be made", name)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_*
        found += 1
    if not found:
        return None
    log.info("tracing delivery attempts, exporting to %s", ", ".join(names))
    return Tracing(provider, version)
