"""Validation and serialisation of events: the pure core of publishing, no I/O.

Everything a producer can get wrong is caught here, before any SQL is sent, so
that a bad call leaves the caller's transaction usable. The output is a
``Batch``: the column arrays the ``publish`` query takes, with nothing left to
decide.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from outbox.errors import InvalidEvent, PayloadTooLarge

MAX_PAYLOAD_BYTES = 1024 * 1024
"""Default limit on the serialized payload (1 MiB)."""

_MAX_TEXT = 255
# Dotted segments of letters, digits and "_-:/" (CloudEvents types such as
# "com.example.order:created" fit); no glob characters, no spaces.
_TYPE = re.compile(r"[A-Za-z0-9_\-:/]+(?:\.[A-Za-z0-9_\-:/]+)*")
# RFC 9110 token characters.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Headers the dispatcher writes itself; letting a producer set them would
# forge the envelope or break the HTTP framing.
_RESERVED_HEADERS = frozenset(
    {"content-type", "content-length", "host", "connection", "transfer-encoding",
     "te", "upgrade", "keep-alive", "proxy-connection", "trailer", "expect",
     "webhook-id", "webhook-timestamp", "webhook-signature"}
)


@dataclass(frozen=True, slots=True)
class Event:
    """One event to publish with :func:`outbox.publish_many`.

    Same fields, same meaning and same validation as the keyword arguments
    of :func:`outbox.publish`.
    """

    type: str
    payload: Any
    key: str | None = None
    headers: Mapping[str, str] | None = None
    idempotency_key: str | None = None
    delay: timedelta | None = None


@dataclass(slots=True)
class Batch:
    """Validated events as the column arrays of the ``publish`` query."""

    ids: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    idempotency_keys: list[str | None] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)

    def params(self) -> dict[str, Any]:
        """Parameters of the ``publish`` query."""
        return {
            "ids": self.ids, "types": self.types, "keys": self.keys,
            "payloads": self.payloads, "headers": self.headers,
            "idempotency_keys": self.idempotency_keys, "delays": self.delays,
        }


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): 48 bits of Unix milliseconds, then random.

    Time order keeps the events primary key appending at its right edge and
    lets retention cut by id range.
    """
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | rand
    value &= ~(0xF << 76)
    value |= 0x7 << 76  # version 7
    value &= ~(0x3 << 62)
    value |= 0x2 << 62  # RFC 4122 variant
    return uuid.UUID(int=value)


def _text(value: object, what: str, *, optional: bool) -> str | None:
    if value is None:
        if optional:
            return None
        raise InvalidEvent(f"{what} is required")
    if not isinstance(value, str):
        raise InvalidEvent(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidEvent(f"{what} must not be empty")
    if len(value) > _MAX_TEXT:
        raise InvalidEvent(f"{what} is longer than {_MAX_TEXT} characters")
    if _CONTROL.search(value):
        raise InvalidEvent(f"{what} must not contain control characters")
    return value


def check_type(event_type: object) -> str:
    """The event type, or InvalidEvent saying what is wrong with it."""
    text = _text(event_type, "event type", optional=False)
    assert text is not None
    if not _TYPE.fullmatch(text):
        raise InvalidEvent(
            f"event type {text!r} is malformed: use dot-separated words of letters, "
            "digits, '_', '-', ':' or '/', such as 'mail.received'"
        )
    return text


def _serialize_payload(payload: object, limit: int) -> str:
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"payload is not JSON-serializable: {exc}") from exc
    size = len(text.encode("utf-8"))
    if size > limit:
        raise PayloadTooLarge(size, limit)
    return text


def _serialize_headers(headers: object) -> str:
    if headers is None:
        return "{}"
    if not isinstance(headers, Mapping):
        raise InvalidEvent("headers must be a mapping of header names to string values")
    clean: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise InvalidEvent(f"header name {name!r} is not a valid HTTP header name")
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith("ce-"):
            raise InvalidEvent(f"header {name!r} is set by the dispatcher and cannot be given")
        if lowered in clean:
            raise InvalidEvent(f"header {name!r} is given twice")
        if not isinstance(value, str):
            raise InvalidEvent(f"header {name!r} must have a string value")
        if _CONTROL.search(value.replace("\t", " ")):
            raise InvalidEvent(f"header {name!r} must not contain control characters")
        clean[lowered] = value
    return json.dumps(clean, ensure_ascii=False)


def _delay_seconds(delay: object) -> float:
    if delay is None:
        return 0.0
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise InvalidEvent("delay must be a datetime.timedelta")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidEvent("delay must not be negative")
    return seconds


def build_batch(events: Sequence[Event], *, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> Batch:
    """Validate and serialise events; raises before the caller sends any SQL."""
    batch = Batch()
    for event in events:
        if not isinstance(event, Event):
            raise InvalidEvent(f"expected outbox.Event, got {type(event).__name__}")
        batch.types.append(check_type(event.type))
        batch.payloads.append(_serialize_payload(event.payload, max_payload_bytes))
        batch.keys.append(_text(event.key, "key", optional=True))
        batch.headers.append(_serialize_headers(event.headers))
        batch.idempotency_keys.append(
            _text(event.idempotency_key, "idempotency_key", optional=True))
        batch.delays.append(_delay_seconds(event.delay))
        batch.ids.append(str(uuid7()))
    return batch
