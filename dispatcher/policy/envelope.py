"""The wire format for an endpoint: its events to request headers and body, signed.

The format itself lives in ``outbox._shared.wire``, shared with the receiving
side (``outbox.receive``, ``outbox.testing.signed_request``) so that what the
dispatcher sends and what a receiver checks cannot drift apart; this module
applies an endpoint's settings to it. Pure: the attempt's ``now`` is passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dispatcher.policy.model import Endpoint, EventData
from outbox._shared.wire import encode_request


def encode(
    endpoint: Endpoint, events: Sequence[EventData], now: datetime, *,
    trace: tuple[str, str | None] | None = None,
) -> tuple[list[tuple[str, str]], bytes]:
    """Headers and body of the one request that delivers ``events`` to ``endpoint``.

    ``now`` is the time of this attempt: it becomes ``webhook-timestamp``, so a
    retry is signed afresh while its ``webhook-id`` stays the same. ``trace``
    (traceparent, tracestate) is sent instead of the events' own trace context;
    an endpoint without trace context (``trace_context=False``) gets neither.
    """
    if not events:
        raise ValueError("encode() needs at least one event")
    batched = endpoint.max_batch > 1
    if len(events) > 1 and not batched:
        raise ValueError(f"endpoint {endpoint.name!r} takes one event per request")
    return encode_request(events, now, keys=endpoint.keys,
                          cloudevents=endpoint.format == "cloudevents", batched=batched,
                          endpoint_headers=endpoint.headers, trace=trace,
                          send_tracestate=endpoint.send_tracestate,
                          trace_context=endpoint.trace_context)


__all__ = ["encode"]
