"""Signed requests for a receiver's own tests, built by the code that signs real deliveries.

``signed_request`` / ``signed_batch`` go through ``outbox._shared.wire``, the
module the dispatcher itself encodes and signs every request with, so a
handler that accepts them accepts the dispatcher's deliveries too::

    request = outbox.testing.signed_request(SECRET, "order.created", {"id": 7})
    response = client.post("/hooks", content=request.body, headers=request.headers)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from outbox._event import check_tenant, uuid7
from outbox._shared.endpoint_defaults import Format
from outbox._shared.wire import encode_request, secret_key
from outbox.receive import Received

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """What a delivery POSTs: ``headers`` (lower-case names) and the raw ``body``."""

    headers: dict[str, str]
    body: bytes
    events: list[Received] = field(default_factory=list)
    """The events as ``Verifier.verify`` reads them back."""


@dataclass(frozen=True, slots=True)
class _Event:
    id: uuid.UUID
    type: str
    key: str | None
    payload: str
    headers: Mapping[str, str]
    created_at: datetime
    tenant: str | None = None


def _keys(secrets: str | Sequence[str]) -> list[bytes]:
    """The keys of ``secrets``, by the rule the ``Verifier`` reads them with."""
    listed = [secrets] if isinstance(secrets, str) else list(secrets)
    return [secret_key(secret) for secret in listed]


def _stamp(timestamp: datetime | float | None) -> datetime:
    if timestamp is None:
        return datetime.now(UTC)
    if isinstance(timestamp, datetime):
        return timestamp
    return datetime.fromtimestamp(timestamp, UTC)


def _wire(event: Received) -> _Event:
    return _Event(id=uuid.UUID(event.id), type=event.type, key=event.key,
                  payload=_ENCODER.encode(event.data), headers={}, created_at=event.time,
                  tenant=event.tenant)


def _received(event: _Event) -> Received:
    return Received(id=str(event.id), type=event.type, key=event.key,
                    data=json.loads(event.payload), time=event.created_at.astimezone(UTC),
                    tenant=event.tenant)


def signed_batch(secrets: str | Sequence[str], events: Sequence[Received], *,
                 format: Format = "standard-webhooks",
                 timestamp: datetime | float | None = None) -> SignedRequest:
    """A batch delivery of ``events`` (ids must be UUIDs), signed with every secret given.

    ``timestamp`` (default now) is the attempt's ``webhook-timestamp``: pass an
    old or future one to test that a handler refuses it.
    """
    wire = [_wire(event) for event in events]
    headers, body = encode_request(wire, _stamp(timestamp), keys=_keys(secrets),
                                   cloudevents=format == "cloudevents", batched=True)
    return SignedRequest(dict(headers), body, [_received(e) for e in wire])


def signed_request(secrets: str | Sequence[str], type: str, data: Any = None, *,
                   key: str | None = None, event_id: str | uuid.UUID | None = None,
                   time: datetime | None = None, format: Format = "standard-webhooks",
                   timestamp: datetime | float | None = None,
                   headers: Mapping[str, str] | None = None,
                   tenant: str | None = None) -> SignedRequest:
    """A delivery of one event, as the dispatcher would POST it, signed with every secret given.

    ``event_id`` defaults to a fresh UUID (send the same request twice to test
    deduplication), ``time`` (the event's publish time) and ``timestamp``
    (this attempt's) to now; ``headers`` are the custom headers of the event;
    ``tenant`` the tenant it belongs to.
    """
    moment = time or datetime.now(UTC)
    wire = _Event(id=uuid.UUID(str(event_id)) if event_id is not None else uuid7(), type=type,
                  key=key, payload=_ENCODER.encode(data), headers=dict(headers or {}),
                  created_at=moment, tenant=check_tenant(tenant))
    sent, body = encode_request([wire], _stamp(timestamp), keys=_keys(secrets),
                                cloudevents=format == "cloudevents")
    return SignedRequest(dict(sent), body, [_received(wire)])
