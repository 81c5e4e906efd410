"""The wire format: events to request headers and body, signed per Standard Webhooks.

One definition for the dispatcher, which sends requests, and for
``outbox.testing.signed_request`` and ``outbox.receive``, which build and check
them in a receiver's tests and handlers: the two sides cannot drift apart.
That includes what a signature covers (:func:`signed_prefix`) and how a
``whsec_`` secret becomes its key (:func:`secret_key`, endpoint definitions
too).

Pure and on the dispatcher's hot path: no I/O, no clock of its own (the
attempt's ``now`` is passed in) and no ``json.loads``. The payload is JSON text
stored byte for byte at publish time, so the envelope is spliced around it as
bytes; re-serialising it would cost time and could change what the producer
wrote.

Choices the documented format leaves open, documented in docs/concepts.md ("The wire"):

- An endpoint with ``max_batch > 1`` always gets an array, even of one event,
  so that a receiver that opted into batches sees one body shape. Its
  ``webhook-id`` is ``batch_`` and a hash of the sorted event ids: the same on
  every retry of the same events, and free of ``.`` as the spec requires.
- CloudEvents ``source`` is the constant ``/outbox-dispatcher``.
- A batch carries only the event headers that every event in it has with the
  same value; the others are left out.
- Custom headers (endpoint and event, the event winning on the same name) never
  replace a header this module writes: those are dropped from the custom set.
- Trace context: ``traceparent`` and ``tracestate`` (when not
  empty) of the event, or of a batch's first event that has one; a
  ``traceparent`` among the custom headers wins. The dispatcher may pass its
  attempt span's context instead (``trace``), a child in the same trace. A
  ``tracestate`` goes out within ``MAX_TRACESTATE`` characters (rows written
  before that bound are cut here too), or not at all for an endpoint that
  leaves it out (``send_tracestate=False``), a custom one included. An
  endpoint without trace context (``trace_context=False``: a customer's,
  which need not learn the sender's traces) gets neither header, from any
  source: the event's context, the dispatcher's span, a custom header.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final, Literal, Protocol
from urllib.parse import quote

from outbox._shared.headers import is_reserved
from outbox._shared.times import rfc3339
from outbox._shared.tracecontext import bounded_tracestate

CLOUDEVENTS_SOURCE: Final = "/outbox-dispatcher"
"""The CloudEvents ``source`` attribute of every event."""
CLOUDEVENTS_BATCH: Final = "application/cloudevents-batch+json"
"""The content type of a CloudEvents batch (JSON batch format)."""

_JSON: Final = ("content-type", "application/json")
_CE_BATCH: Final = ("content-type", CLOUDEVENTS_BATCH)
_CE_SPECVERSION: Final = ("ce-specversion", "1.0")
_CE_SOURCE: Final = ("ce-source", CLOUDEVENTS_SOURCE)
_CE_PREFIX: Final = '{"specversion":"1.0","id":"'
_CE_MIDDLE: Final = '","source":' + json.dumps(CLOUDEVENTS_SOURCE) + ',"type":'
# CloudEvents HTTP binding 3.1.3.2: printable ASCII except space, '"' and '%'
# goes into a ce- header as is; everything else is percent-encoded.
_CE_SAFE: Final = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in ' "%')

SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - the prefix of every secret, none itself
_SECRET_RULES: Final = {"prefix": "a secret must be a str starting with 'whsec_'",
                        "base64": "a whsec_ secret must hold base64 after its prefix",
                        "empty": "a whsec_ secret must not be empty"}


class BadSecret(ValueError):
    """A secret that breaks a rule of :func:`secret_key`, never shown; ``rule`` says which."""

    def __init__(self, rule: Literal["prefix", "base64", "empty"]) -> None:
        super().__init__(_SECRET_RULES[rule])
        self.rule = rule


def secret_key(secret: object) -> bytes:
    """The HMAC key of a ``whsec_`` secret: the base64 after the prefix, padding optional.

    One rule for the receiver's ``Verifier``, ``outbox.testing``'s signed
    requests and endpoint definitions (which also bound the key's length):
    a str with the prefix, strict base64 after it, not empty. Anything else
    raises :class:`BadSecret`, a ValueError.
    """
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise BadSecret("prefix")
    encoded = secret[len(SECRET_PREFIX):]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise BadSecret("base64") from None
    if not key:
        raise BadSecret("empty")
    return key


class WireEvent(Protocol):
    """What the wire needs of an event (the dispatcher's ``EventData`` is one)."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def type(self) -> str: ...
    @property
    def key(self) -> str | None: ...
    @property
    def payload(self) -> str: ...  # the producer's JSON text, byte for byte
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def created_at(self) -> datetime: ...
    # Optional: ``traceparent`` and ``tracestate`` (str or None), read with getattr.


def signed_prefix(msg_id: str, timestamp: int) -> bytes:
    """What a signature covers before the body: ``"{msg_id}.{timestamp}."``.

    The body follows as is (signers feed it to the HMAC after this, so that
    it is never copied). A ``webhook-id`` read by a receiver may hold bytes
    that are not UTF-8 (``surrogateescape``): they are signed as received.
    """
    return b"%s.%d." % (msg_id.encode("utf-8", "surrogateescape"), timestamp)


def signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    """What a signature covers: ``"{msg_id}.{timestamp}.{body}"``."""
    return signed_prefix(msg_id, timestamp) + body


@functools.lru_cache(maxsize=256)
def keyed_hmac(key: bytes) -> hmac.HMAC:
    """HMAC-SHA256 keyed with ``key``, to ``.copy()`` before use.

    The key schedule (padding, inner and outer hash states) done once per key;
    copying it is cheaper than hmac.new() on every request.
    """
    return hmac.new(key, digestmod=hashlib.sha256)


def sign_content(key: bytes, *content: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of ``content``, its parts in order."""
    mac = keyed_hmac(key).copy()
    for part in content:
        mac.update(part)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of ``"{msg_id}.{timestamp}.{body}"`` under ``key``."""
    return sign_content(key, signed_content(msg_id, timestamp, body))


def batch_id(events: Iterable[WireEvent]) -> str:
    """The ``webhook-id`` of a batch: the same for the same events in any order."""
    ids = sorted(str(event.id) for event in events)
    return "batch_" + hashlib.sha256(",".join(ids).encode()).hexdigest()[:32]


def tenant_of(event: WireEvent) -> str | None:
    """The event's tenant, None for none (an event kind without one has none)."""
    tenant = getattr(event, "tenant", None)
    return tenant if isinstance(tenant, str) else None


MAX_TENANT = 200
"""A tenant is 1 to MAX_TENANT printable ASCII characters (publish() checks it)."""


def header_tenant(tenant: str | None) -> str | None:
    """The tenant as the ``ce-tenant`` header may carry it: 1 to 200 printable ASCII
    characters, as ``publish()`` and the tables' CHECK (schema version 14) allow; None
    for anything else (a row written by hand before that CHECK), so that no stored value
    can put a line break or a byte of its choosing into the request's head."""
    if tenant is None or not 1 <= len(tenant) <= MAX_TENANT:
        return None
    return tenant if all(" " <= char <= "~" for char in tenant) else None


def _webhook_body(event: WireEvent) -> str:
    key = "null" if event.key is None else json.dumps(event.key)
    tenant = tenant_of(event)
    member = "" if tenant is None else ',"tenant":' + json.dumps(tenant)
    return (
        f'{{"id":"{event.id}","type":{json.dumps(event.type)},'
        f'"timestamp":"{rfc3339(event.created_at)}","key":{key}{member},'
        f'"data":{event.payload}}}'
    )


def _structured_cloudevent(event: WireEvent) -> str:
    subject = "" if event.key is None else ',"subject":' + json.dumps(event.key)
    tenant = tenant_of(event)
    if tenant is not None:  # an extension attribute (lower-case letters and digits only)
        subject += ',"tenant":' + json.dumps(tenant)
    return (
        f"{_CE_PREFIX}{event.id}{_CE_MIDDLE}{json.dumps(event.type)},"
        f'"time":"{rfc3339(event.created_at)}"{subject},'
        f'"datacontenttype":"application/json","data":{event.payload}}}'
    )


def _custom_headers(
    endpoint_headers: Mapping[str, str], event_headers: Mapping[str, str]
) -> list[tuple[str, str]]:
    merged: dict[str, str] = {}
    for source in (endpoint_headers, event_headers):  # later wins
        for name, value in source.items():
            lowered = name.lower()
            if is_reserved(lowered):
                continue
            merged[lowered] = value
    return list(merged.items())


def _common_headers(events: Sequence[WireEvent]) -> Mapping[str, str]:
    first, *rest = events
    if not first.headers:
        return first.headers
    common = {name.lower(): value for name, value in first.headers.items()}
    for event in rest:
        other = {name.lower(): value for name, value in event.headers.items()}
        common = {name: value for name, value in common.items() if other.get(name) == value}
    return common


def first_trace(events: Iterable[WireEvent]) -> tuple[str, str | None] | None:
    """(traceparent, tracestate) of the first event that has a trace context, or None."""
    for event in events:
        traceparent = getattr(event, "traceparent", None)
        if traceparent:
            return traceparent, getattr(event, "tracestate", None) or None
    return None


def encode_request(
    events: Sequence[WireEvent], now: datetime, *, keys: Sequence[bytes] = (),
    cloudevents: bool = False, batched: bool = False,
    endpoint_headers: Mapping[str, str] | None = None,
    trace: tuple[str, str | None] | None = None, send_tracestate: bool = True,
    trace_context: bool = True,
) -> tuple[list[tuple[str, str]], bytes]:
    """Headers and body of the one request that delivers ``events``.

    ``now`` is the time of this attempt: it becomes ``webhook-timestamp``, so a
    retry is signed afresh while its ``webhook-id`` stays the same. ``keys``
    sign it (none: unsigned), newest first; ``batched`` sends an array.
    ``trace`` replaces the events' own trace context on the wire;
    ``send_tracestate=False`` sends ``traceparent`` alone; ``trace_context=False``
    sends neither.
    """
    if not events:
        raise ValueError("encode() needs at least one event")
    headers: list[tuple[str, str]]
    if batched:
        msg_id = batch_id(events)
        part = _structured_cloudevent if cloudevents else _webhook_body
        body = ("[" + ",".join(part(event) for event in events) + "]").encode()
        headers = [_CE_BATCH if cloudevents else _JSON]
        event_headers = _common_headers(events)
    else:
        event = events[0]
        msg_id = str(event.id)
        event_headers = event.headers
        if cloudevents:
            body = event.payload.encode()
            headers = [
                _JSON, _CE_SPECVERSION, ("ce-id", msg_id), ("ce-type", event.type),
                _CE_SOURCE, ("ce-time", rfc3339(event.created_at)),
            ]
            if event.key is not None:
                headers.append(("ce-subject", quote(event.key, safe=_CE_SAFE)))
            tenant = header_tenant(tenant_of(event))
            if tenant is not None:  # printable ASCII: sent as it is
                headers.append(("ce-tenant", tenant))
        else:
            body = _webhook_body(event).encode()
            headers = [_JSON]
    if keys or not cloudevents:
        timestamp = int(now.timestamp())
        headers.append(("webhook-id", msg_id))
        headers.append(("webhook-timestamp", str(timestamp)))
        if keys:
            prefix = signed_prefix(msg_id, timestamp)
            signatures = " ".join(sign_content(key, prefix, body) for key in keys)
            headers.append(("webhook-signature", signatures))
    custom = _custom_headers(endpoint_headers or {}, event_headers)
    if not trace_context:
        headers += [(name, value) for name, value in custom if name not in _TRACE_HEADERS]
        return headers, body
    _append_trace(headers, trace or first_trace(events), custom, send_tracestate)
    return headers, body


_TRACE_HEADERS: Final = frozenset({"traceparent", "tracestate"})


def _append_trace(headers: list[tuple[str, str]], context: tuple[str, str | None] | None,
                  custom: list[tuple[str, str]], send_tracestate: bool) -> None:
    """The trace context, then the custom headers; any tracestate bounded, or left out."""
    if context is not None and not any(name == "traceparent" for name, _ in custom):
        headers.append(("traceparent", context[0]))
        custom = [("tracestate", context[1] or ""), *custom]
    for name, value in custom:
        if name != "tracestate":
            headers.append((name, value))
            continue
        state = bounded_tracestate(value) if send_tracestate else None
        if state:
            headers.append((name, state))
