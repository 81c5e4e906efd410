"""Validation and serialisation of events: the pure core of publishing, no I/O.

Everything a producer can get wrong is caught here, before any SQL is sent, so
that a bad call leaves the caller's transaction usable. The output is a
``Batch``: the parameters the ``publish`` query takes, with nothing left to
decide.

It runs for every event inside the caller's transaction, so it keeps per-event
work small: one shared JSON encoder, one ``os.urandom`` call per batch, a cache
of the event types already found valid.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as dt_time
from decimal import Decimal
from functools import lru_cache
from typing import Any, NoReturn

from outbox._shared.headers import HEADER_NAME, is_reserved, value_problem
from outbox._shared.tracecontext import TraceContext, from_headers
from outbox._shared.wire import MAX_TENANT
from outbox.errors import InvalidEvent, PayloadTooLarge

MAX_PAYLOAD_BYTES = 1024 * 1024
"""Default limit on the serialized payload (1 MiB)."""

_MAX_TEXT = 255
# Far enough for any real schedule, near enough that timestamps cannot overflow.
_MAX_DELAY = timedelta(days=3660)
# Dotted segments of letters, digits and "_-:/" (CloudEvents types such as
# "com.example.order:created" fit); no glob characters, no spaces.
_TYPE = re.compile(r"[A-Za-z0-9_\-:/]+(?:\.[A-Za-z0-9_\-:/]+)*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Compact, non-ASCII kept as is, NaN and Infinity refused (they are not JSON).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _everyday(value: object) -> object:
    """The JSON form of a payload value of a type applications use every day: datetime,
    date and time as ISO 8601 (``isoformat()``: an aware one keeps its offset, a naive one
    has none), a UUID as its canonical string, a Decimal as its exact string (as
    Django's encoder writes it; NaN and infinities refused, as a float's are). Anything
    else raises TypeError, as the json module does."""
    if isinstance(value, datetime | date | dt_time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a finite number")
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# Payloads only: the other columns are ours, of known types.
_PAYLOAD_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                                    default=_everyday)


def _place(value: object, where: str = "payload", depth: int = 0,
           walked: set[int] | None = None) -> str | None:
    """Where in ``value`` the first value JSON cannot hold is (``payload["items"][2]``);
    walked only once encoding has failed, so the common path pays nothing. Each
    container is walked once (``walked``), so one shared many times, or holding
    itself, costs its size, not a walk per path to it."""
    items: list[tuple[str, object]] = []
    walked = set() if walked is None else walked
    if isinstance(value, dict | list | tuple):
        if id(value) in walked:
            return None
        walked.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                return f"{where} (a key of type {type(key).__name__})"
            items.append((f"{where}[{json.dumps(str(key), ensure_ascii=False)}]", item))
    elif isinstance(value, list | tuple):
        items = [(f"{where}[{n}]", item) for n, item in enumerate(value)]
    else:
        try:
            _PAYLOAD_ENCODER.encode(value)
        except (TypeError, ValueError):
            return where
        return None
    if depth < 100:
        for place, item in items:
            found = _place(item, place, depth + 1, walked)
            if found:
                return found
    return None


@dataclass(frozen=True, slots=True)
class Event:
    """One event to publish with :func:`outbox.publish_many`.

    Same fields, same meaning and same validation as the arguments of
    :func:`outbox.publish`.
    """

    type: str
    payload: Any
    key: str | None = None
    headers: Mapping[str, str] | None = None
    idempotency_key: str | None = None
    delay: timedelta | None = None
    tenant: str | None = None


@dataclass(slots=True)
class Batch:
    """Validated events as the parameters of the ``publish`` query.

    Every column travels as one JSON array (a single text parameter) rather
    than as a PostgreSQL array: payloads and headers are JSON already, so
    joining them costs nothing, and the other columns are encoded by the
    json module's C encoder in one call each. Drivers adapt Python lists
    element by element in Python (psycopg escapes every quote of every
    payload), which cost more than the database's work on a large batch.
    """

    ids: list[str] = field(default_factory=list)
    uuids: list[uuid.UUID] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    idempotency_keys: list[str | None] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    traceparents: list[str | None] = field(default_factory=list)
    tracestates: list[str | None] = field(default_factory=list)
    tenants: list[str | None] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # as given, for the quota check

    def params(self) -> dict[str, Any]:
        """Parameters of the ``publish`` query."""
        encode = _ENCODER.encode
        return {
            "ids": encode(self.ids), "types": encode(self.types), "keys": encode(self.keys),
            "payloads": "[" + ",".join(self.payloads) + "]",
            "headers": "[" + ",".join(self.headers) + "]",
            "idempotency_keys": encode(self.idempotency_keys), "delays": encode(self.delays),
            "traceparents": encode(self.traceparents),
            "tracestates": encode(self.tracestates), "tenants": encode(self.tenants),
        }


_VERSION_VARIANT = 0x7 << 76 | 0x2 << 62  # version 7, RFC 9562 variant
_RANDOM_BITS = ((1 << 80) - 1) & ~(0xF << 76) & ~(0x3 << 62)


def uuid7_ints(count: int) -> list[int]:
    """``count`` time-ordered UUIDs (RFC 9562 version 7) as integers.

    48 bits of Unix milliseconds, then random bits (one ``os.urandom`` call
    for all of them). Time order keeps the events primary key appending at
    its right edge and lets retention cut by id range.
    """
    stamp = (time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF) << 80 | _VERSION_VARIANT
    pool = os.urandom(10 * count)
    return [stamp | int.from_bytes(pool[i:i + 10], "big") & _RANDOM_BITS
            for i in range(0, 10 * count, 10)]


def uuid7() -> uuid.UUID:
    """One time-ordered UUID (RFC 9562 version 7)."""
    return uuid.UUID(int=uuid7_ints(1)[0])


def _utf8(value: str, what: str) -> None:
    """Refuse text that cannot be encoded (lone surrogates) before a driver trips on it."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEvent(f"{what} is not valid Unicode (lone surrogate)") from None


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
    _utf8(value, what)
    return value


@lru_cache(maxsize=1024)
def _checked_type(event_type: str) -> str:
    text = _text(event_type, "event type", optional=False)
    if text is None or not _TYPE.fullmatch(text):
        raise InvalidEvent(
            f"event type {event_type!r} is malformed: use dot-separated words of letters, "
            "digits, '_', '-', ':' or '/', such as 'mail.received'"
        )
    return text


# A tenant is 1 to MAX_TENANT printable ASCII characters: it travels as the CloudEvents
# header ce-tenant too (outbox._shared.wire), and the tables' CHECK says the same.


def check_tenant(tenant: object) -> str | None:
    """The tenant (None: none), or InvalidEvent saying what is wrong with it."""
    if tenant is None:
        return None
    if not isinstance(tenant, str):
        raise InvalidEvent(f"tenant must be a string or None, not {type(tenant).__name__}")
    if not 1 <= len(tenant) <= MAX_TENANT:
        raise InvalidEvent(f"tenant must be 1 to {MAX_TENANT} characters long, "
                           f"not {len(tenant)}")
    for place, char in enumerate(tenant):
        if not " " <= char <= "~":
            raise InvalidEvent(f"tenant must be printable ASCII: character {place + 1} is "
                               f"U+{ord(char):04X}")
    return str(tenant)


def check_type(event_type: object) -> str:
    """The event type, or InvalidEvent saying what is wrong with it."""
    if type(event_type) is not str:
        _text(event_type, "event type", optional=False)  # raises unless a str subclass
        event_type = str(event_type)
    return _checked_type(event_type)


def _size_bound(payload: object, limit: int) -> int | None:
    """An upper bound of the payload's serialised size in bytes, from one walk of its
    containers; None when it holds a type only ``default=`` converts, or a subclass.
    PayloadTooLarge at once when the walk alone proves the payload over the limit: a
    string longer than the limit (each character takes at least a byte), or more
    values than the limit has bytes (each takes at least one). So the walk costs at
    most about the limit, however large the payload, and no encoder copies it.

    Any character takes at most 6 bytes in the JSON (a control character as
    ``\\u001f``; UTF-8 takes at most 4), an integer at most a third of its bits in
    digits, a float 24 characters at most. A payload bounded under the limit is
    encoded at once by the json module's C encoder, the fast path; any other is
    encoded in parts (_pieces), and refused as soon as they pass the limit.
    """
    total = 0
    seen = 0
    stack: list[Any] = [[payload]]
    while stack:
        value = stack.pop()
        if type(value) is dict:
            for key in value:
                total += 6 * len(key) + 4 if type(key) is str else 28  # quotes, colon, comma
            children = value.values()
        else:
            children = value
        total += 2
        seen += len(value)
        if seen > limit:
            _refuse(payload, seen, limit)
        for item in children:
            kind = type(item)
            if kind is str:
                if len(item) + 2 > limit:
                    raise PayloadTooLarge(len(item) + 2, limit)
                total += 6 * len(item) + 3  # quotes, and a comma
            elif kind is int:
                total += item.bit_length() // 3 + 3
            elif kind is float or kind is bool or item is None:
                total += 26
            elif kind is dict or kind is list or kind is tuple:
                stack.append(item)
            else:
                return None  # a subclass, or a type default= converts: no bound without it
    return total


def _refuse(payload: object, values: int, limit: int) -> NoReturn:
    """More values than the limit has bytes: a payload that holds itself (ValueError, as
    json says it), else one over the limit (PayloadTooLarge, at least that many bytes)."""
    if _cycle(payload, limit):
        raise ValueError("Circular reference detected")
    raise PayloadTooLarge(values, limit)


def _cycle(payload: object, budget: int) -> bool:
    """Whether a container holds itself, found by a walk down each path of at most
    ``budget`` values (past it the payload is over the limit anyway)."""
    path: set[int] = set()
    frames: list[tuple[object, Iterator[object]]] = []

    def enter(value: object) -> bool:
        """Step into ``value`` if it is a container; True if it is one already on the path."""
        if isinstance(value, dict):
            inside: Iterator[object] = iter(value.values())
        elif isinstance(value, list | tuple):
            inside = iter(value)
        else:
            return False
        if id(value) in path:
            return True
        path.add(id(value))
        frames.append((value, inside))
        return False

    if enter(payload):
        return True
    while frames and budget > 0:
        value, inside = frames[-1]
        for item in inside:
            budget -= 1
            if enter(item):
                return True
            if frames[-1][0] is not value or budget <= 0:
                break
        else:
            frames.pop()
            path.discard(id(value))
    return False


def _pieces(value: object, limit: int, path: set[int]) -> Iterator[str]:
    """``value`` as JSON text in pieces: each part _size_bound vouches for (under the
    limit) in one call of the C encoder, the containers around them piece by piece, so
    a payload of many values costs about what one call would, and a huge one about the
    limit. ``path``: the containers being encoded, to refuse a cycle as json does."""
    bound = _size_bound(value, limit)
    if (bound is not None and bound <= limit) or not isinstance(value, dict | list | tuple):
        yield _PAYLOAD_ENCODER.encode(value)
        return
    if id(value) in path:
        raise ValueError("Circular reference detected")
    path.add(id(value))
    if isinstance(value, dict):
        yield "{"
        for n, (key, item) in enumerate(value.items()):
            # The key as the encoder writes keys (a number or None as a string).
            yield ("," if n else "") + _PAYLOAD_ENCODER.encode({key: 0})[1:-2]
            yield from _pieces(item, limit, path)
        yield "}"
    else:
        yield "["
        for n, item in enumerate(value):
            if n:
                yield ","
            yield from _pieces(item, limit, path)
        yield "]"
    path.discard(id(value))


def _stream(payload: object, limit: int) -> tuple[str, int]:
    """The payload encoded piece by piece, and its size; PayloadTooLarge as soon as the
    pieces pass ``limit``, so a huge payload costs about the limit, not its size."""
    pieces: list[str] = []
    size = 0
    for piece in _pieces(payload, limit, set()):
        size += len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise PayloadTooLarge(size, limit)
        pieces.append(piece)
    return "".join(pieces), size


def _serialize_payload(payload: object, limit: int) -> str:
    try:
        bound = _size_bound(payload, limit)
        if bound is None or bound > limit:
            text, size = _stream(payload, limit)
        else:
            text = _PAYLOAD_ENCODER.encode(payload)
            size = len(text)
    except (TypeError, ValueError) as exc:
        place = _place(payload)
        at = f" at {place}" if place and place != "payload" else ""
        raise InvalidEvent(f"payload is not JSON-serializable{at}: {exc}") from None
    except RecursionError as exc:
        raise InvalidEvent(f"payload is not JSON-serializable: {exc}") from None
    if not text.isascii():
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidEvent("payload is not valid Unicode (lone surrogate)") from None
    if size > limit:
        raise PayloadTooLarge(size, limit)
    return text


_NO_HEADERS: Mapping[str, str] = {}


def _serialize_headers(headers: object) -> tuple[str, Mapping[str, str]]:
    """The headers as JSON text, and as a dict of lower-case names."""
    if headers is None:
        return "{}", _NO_HEADERS
    if not isinstance(headers, Mapping):
        raise InvalidEvent("headers must be a mapping of header names to string values")
    if not headers:
        return "{}", _NO_HEADERS
    clean: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise InvalidEvent(f"header name {name!r} is not a valid HTTP header name")
        lowered = name.lower()
        if is_reserved(lowered):
            raise InvalidEvent(f"header {name!r} is set by the dispatcher and cannot be given")
        if lowered in clean:
            raise InvalidEvent(f"header {name!r} is given twice")
        if not isinstance(value, str):
            raise InvalidEvent(f"header {name!r} must have a string value, "
                               f"not {type(value).__name__}")
        problem = value_problem(value)  # printable ASCII: it travels as it is
        if problem:
            raise InvalidEvent(f"header {name!r} {problem}")
        clean[lowered] = value
    return _ENCODER.encode(clean), clean


def _delay_seconds(delay: object) -> float:
    if delay is None:
        return 0.0
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        try:
            seconds = float(delay)
        except OverflowError:  # an int beyond any float: far out of range either way
            seconds = math.inf if delay > 0 else -math.inf
    else:
        raise InvalidEvent(f"delay must be a datetime.timedelta, not {type(delay).__name__}")
    if math.isnan(seconds) or seconds < 0:
        raise InvalidEvent("delay must not be negative")
    if seconds > _MAX_DELAY.total_seconds():
        raise InvalidEvent(f"delay must be at most {_MAX_DELAY.days} days")
    return seconds


def build_batch(events: Sequence[Event], *, max_payload_bytes: int = MAX_PAYLOAD_BYTES,
                trace: TraceContext | None = None) -> Batch:
    """Validate and serialise events; raises before the caller sends any SQL.

    ``trace`` is the trace context of the span current at the call (None:
    none); an event whose ``headers`` give a valid ``traceparent`` keeps that
    one (and its ``tracestate``, if given) instead.
    """
    batch = Batch()
    for event in events:
        if not isinstance(event, Event):
            raise InvalidEvent(f"expected outbox.Event, got {type(event).__name__}")
        batch.types.append(check_type(event.type))
        batch.payloads.append(_serialize_payload(event.payload, max_payload_bytes))
        batch.keys.append(_text(event.key, "key", optional=True))
        text, clean = _serialize_headers(event.headers)
        batch.headers.append(text)
        own = from_headers(clean) if "traceparent" in clean else None
        context = own or trace
        batch.traceparents.append(context.traceparent if context else None)
        batch.tracestates.append(context.tracestate if context else None)
        batch.idempotency_keys.append(
            _text(event.idempotency_key, "idempotency_key", optional=True))
        batch.delays.append(_delay_seconds(event.delay))
        batch.tenants.append(check_tenant(event.tenant))
        batch.events.append(event)
    for value in uuid7_ints(len(batch.types)):
        hexa = f"{value:032x}"
        batch.ids.append(f"{hexa[:8]}-{hexa[8:12]}-{hexa[12:16]}-{hexa[16:20]}-{hexa[20:]}")
        batch.uuids.append(uuid.UUID(int=value))
    return batch
