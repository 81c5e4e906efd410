"""A verified request's body read into events, in the one format its verifier expects.

Pure: no I/O. The formats are those ``outbox._shared.wire`` writes for the
dispatcher:

- ``standard-webhooks``: a JSON object ``{"id", "type", "timestamp", "key",
  "data"}``, or an array of them for an endpoint that takes batches, sent as
  ``application/json`` with no ``ce-`` header;
- ``cloudevents``: binary mode (the event's attributes in ``ce-*`` headers,
  the payload as the body), or a batch (``application/cloudevents-batch+json``,
  an array of structured events); ``application/cloudevents+json``, one
  structured event, is read too.

The signature covers ``webhook-id``, ``webhook-timestamp`` and the body, not
the other headers. So the headers never choose how the body is read: a
verifier reads the format it was made for, and refuses a request that shows
signs of the other (a ``ce-`` header or a CloudEvents content type given to a
Standard Webhooks verifier, neither given to a CloudEvents one) or of both at
once (``ce-`` headers beside a structured or batch body). Otherwise a captured
Standard Webhooks request with ``ce-type`` and ``ce-subject`` added would be
read as another event type and key, under a valid signature.

In binary mode ``ce-id`` must equal the signed ``webhook-id`` (else the
request is refused); ``ce-type``, ``ce-subject``, ``ce-time`` are taken as
sent, outside the signature. The Standard Webhooks body and the CloudEvents
batch carry every attribute inside the signed body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol
from urllib.parse import unquote

from outbox._shared.endpoint_defaults import Format
from outbox._shared.wire import CLOUDEVENTS_BATCH, header_tenant
from outbox.errors import InvalidDelivery

_CE_STRUCTURED: Final = "application/cloudevents+json"
# The CloudEvents attributes a binary-mode request may carry, looked up by name
# when the headers object cannot list its names (it offers get() alone).
_CE_ATTRIBUTES: Final = tuple(f"ce-{name}" for name in (
    "specversion", "id", "type", "source", "subject", "time", "datacontenttype",
    "dataschema", "tenant"))


class Headers(Protocol):
    """What is read of the request's headers: a dict, Starlette's, Django's, Flask's..."""

    def get(self, key: str, /) -> str | None:
        """The header's value, or None; ``key`` is lower case (``webhook-id``)."""


@dataclass(frozen=True, slots=True)
class Received:
    """One event of a verified delivery."""

    id: str
    """The event id (``webhook-id`` of a single delivery, ``ce-id``): deduplicate on it."""
    type: str
    key: str | None
    """The ordering key, or None."""
    data: Any
    """The payload, parsed from JSON."""
    time: datetime
    """When the event was published (aware, UTC)."""
    tenant: str | None = None
    """The tenant the event belongs to, or None (also for a delivery of a release that
    sent none). Signed in the body of a Standard Webhooks request and of a CloudEvents
    batch; in CloudEvents binary mode it is the ``ce-tenant`` header, which the signature
    does not cover (as ``ce-type`` and ``ce-subject``): whoever captured the request could
    resend it within the tolerance with another tenant."""


def header(headers: Headers, name: str) -> str | None:
    """The value of header ``name`` (lower-case), looked up in any case."""
    value = headers.get(name)
    if value is None and isinstance(headers, Mapping):
        # A plain dict is case-sensitive: look for the name in another case.
        # (Starlette's, Django's and Werkzeug's headers answer get() in any case.)
        for other, found in headers.items():
            if isinstance(other, str) and other.lower() == name:
                return str(found)
    return value


def _names(headers: Headers) -> Iterable[str]:
    """The header names, lower-cased, as far as the headers object can list them.

    ``keys()`` rather than iteration: Werkzeug's headers iterate as pairs.
    """
    keys = getattr(headers, "keys", None)
    if callable(keys):
        return [str(name).lower() for name in keys()]
    return [name for name in _CE_ATTRIBUTES if headers.get(name) is not None]


def read(fmt: Format, headers: Headers, body: bytes, msg_id: str) -> list[Received]:
    """The events of a signed request in format ``fmt``; InvalidDelivery if it is not one."""
    media = (header(headers, "content-type") or "").split(";", 1)[0].strip().lower()
    ce_headers = sorted({name for name in _names(headers) if name.startswith("ce-")})
    ce_media = media.startswith("application/cloudevents")
    if fmt == "standard-webhooks":
        if ce_media or ce_headers:
            sign = f"content type {media}" if ce_media else f"the header {ce_headers[0]}"
            raise InvalidDelivery(
                f"a Standard Webhooks delivery carries no CloudEvents sign, but this request "
                f"has {sign}: refused, as headers outside the signature cannot choose how "
                "the body is read (a CloudEvents endpoint needs "
                "Verifier(..., format='cloudevents'))")
        return _webhooks(body, msg_id)
    if ce_media:
        if ce_headers:
            raise InvalidDelivery(
                f"a CloudEvents {media} body comes without ce- headers, but this request "
                f"has {ce_headers[0]}")
        if media == CLOUDEVENTS_BATCH:
            return _batch(body)
        if media == _CE_STRUCTURED:
            return [_structured(_json(body), "the structured event", msg_id)]
        raise InvalidDelivery(f"the content type {media} is no CloudEvents format read here")
    if "ce-specversion" not in ce_headers and header(headers, "ce-specversion") is None:
        raise InvalidDelivery(
            "not a CloudEvents delivery: no ce-specversion header and no CloudEvents "
            "content type (a Standard Webhooks endpoint needs "
            "Verifier(..., format='standard-webhooks'), the default)")
    return [_binary(headers, body, msg_id)]


def _webhooks(body: bytes, msg_id: str) -> list[Received]:
    parsed = _json(body)
    if isinstance(parsed, list):
        if not parsed:
            raise InvalidDelivery("a batch must hold at least one event")
        return [_webhook(item, f"element {n} of the batch") for n, item in enumerate(parsed, 1)]
    event = _webhook(parsed, "the body")
    if event.id != msg_id:
        raise InvalidDelivery("the body's id differs from the signed webhook-id")
    return [event]


def _batch(body: bytes) -> list[Received]:
    items = _json(body)
    if not isinstance(items, list) or not items:
        raise InvalidDelivery("a CloudEvents batch must be a non-empty JSON array")
    return [_structured(item, f"element {n} of the batch") for n, item in enumerate(items, 1)]


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidDelivery(f"the body is not JSON ({type(exc).__name__})") from None


def _text(obj: dict[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidDelivery(f"{where}: {name!r} is missing or not a non-empty string")
    return value


def _time(value: str, where: str, name: str = "") -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidDelivery(f"{where}{name} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise InvalidDelivery(f"{where}{name} has no time zone offset")
    return moment


def _optional_key(obj: dict[str, Any], name: str, where: str) -> str | None:
    key = obj.get(name)
    if key is not None and not isinstance(key, str):
        raise InvalidDelivery(f"{where}: {name!r} is neither a string nor null")
    return key


def _webhook(obj: Any, where: str) -> Received:
    if not isinstance(obj, dict):
        raise InvalidDelivery(f"{where} is not a JSON object")
    if "data" not in obj:
        raise InvalidDelivery(f"{where}: 'data' is missing")
    return Received(id=_text(obj, "id", where), type=_text(obj, "type", where),
                    key=_optional_key(obj, "key", where), data=obj["data"],
                    time=_time(_text(obj, "timestamp", where), where, ": 'timestamp'"),
                    tenant=_optional_key(obj, "tenant", where))


def _structured(obj: Any, where: str, msg_id: str | None = None) -> Received:
    if not isinstance(obj, dict):
        raise InvalidDelivery(f"{where} is not a JSON object")
    if obj.get("specversion") != "1.0":
        raise InvalidDelivery(f"{where}: 'specversion' is not '1.0'")
    event = Received(id=_text(obj, "id", where), type=_text(obj, "type", where),
                     key=_optional_key(obj, "subject", where), data=obj.get("data"),
                     time=_time(_text(obj, "time", where), where, ": 'time'"),
                     tenant=_optional_key(obj, "tenant", where))
    if msg_id is not None and event.id != msg_id:
        raise InvalidDelivery(f"{where}: its id differs from the signed webhook-id")
    return event


def _binary(headers: Headers, body: bytes, msg_id: str) -> Received:
    values = {}
    for name in ("ce-specversion", "ce-id", "ce-type", "ce-time"):
        value = header(headers, name)
        if not value:
            raise InvalidDelivery(f"the {name} header is missing")
        values[name] = value
    if values["ce-specversion"] != "1.0":
        raise InvalidDelivery("ce-specversion is not 1.0")
    if values["ce-id"] != msg_id:
        raise InvalidDelivery("ce-id differs from the signed webhook-id")
    subject = header(headers, "ce-subject")
    if subject is not None:
        try:
            subject = unquote(subject, errors="strict")
        except UnicodeDecodeError:
            raise InvalidDelivery("ce-subject is not percent-encoded UTF-8") from None
    tenant = header(headers, "ce-tenant")
    if tenant is not None and header_tenant(tenant) != tenant:
        raise InvalidDelivery("ce-tenant is not 1 to 200 printable ASCII characters")
    return Received(id=values["ce-id"], type=values["ce-type"], key=subject,
                    data=_json(body), time=_time(values["ce-time"], "ce-time"),
                    tenant=tenant)
