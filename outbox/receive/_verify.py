"""Verifier: a request's signature and timestamp checked, its body read into events.

Pure: no I/O. The clock is read once per call (``time.time()``) and handed to
:meth:`Verifier.verify_at`, which tests and benchmarks may call with a time
of their own. The format is the one ``outbox._shared.wire`` writes for the
dispatcher, read back here:

- Standard Webhooks: a JSON object ``{"id", "type", "timestamp", "key",
  "data"}``, or an array of them for an endpoint that takes batches;
- CloudEvents binary mode: the event's attributes in ``ce-*`` headers, the
  payload as the body; a batch is ``application/cloudevents-batch+json``, an
  array of structured events (``application/cloudevents+json``, one
  structured event, is read too).

The signature covers ``webhook-id``, ``webhook-timestamp`` and the body, not
the other headers. So in CloudEvents binary mode ``ce-id`` must equal the
signed ``webhook-id`` (else the request is refused), while ``ce-type``,
``ce-subject`` and ``ce-time`` are taken as sent: the Standard Webhooks
envelope and the CloudEvents batch carry them inside the signed body.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Protocol
from urllib.parse import unquote

from outbox._shared.wire import CLOUDEVENTS_BATCH, keyed_hmac
from outbox.errors import InvalidDelivery, InvalidSignature

DEFAULT_TOLERANCE: Final = timedelta(minutes=5)
_PREFIX: Final = "whsec_"
_CE_STRUCTURED: Final = "application/cloudevents+json"


class Headers(Protocol):
    """What is read of the request's headers: a dict, Starlette's, Django's, Flask's..."""

    def get(self, key: str, /) -> str | None: ...


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


def _key(secret: str) -> bytes:
    if not isinstance(secret, str) or not secret.startswith(_PREFIX):
        raise ValueError("a secret must be a str starting with 'whsec_'")
    encoded = secret[len(_PREFIX):]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a whsec_ secret must hold base64 after its prefix") from None
    if not key:
        raise ValueError("a whsec_ secret must not be empty")
    return key


def _header(headers: Headers, name: str) -> str | None:
    value = headers.get(name)
    if value is None and isinstance(headers, Mapping):
        # A plain dict is case-sensitive: look for the name in another case.
        # (Starlette's, Django's and Werkzeug's headers answer get() in any case.)
        for other, found in headers.items():
            if isinstance(other, str) and other.lower() == name:
                return str(found)
    return value


def _required(headers: Headers, name: str) -> str:
    value = _header(headers, name)
    if not value:
        raise InvalidSignature(f"the {name} header is missing")
    return value


class Verifier:
    """Checks deliveries signed with any of ``secrets`` (``whsec_...``; several while rotating).

    ``tolerance`` bounds how far ``webhook-timestamp`` (the attempt's time) may
    be from the receiver's clock, in the past or the future: a request
    captured and replayed later is refused.
    """

    __slots__ = ("_keys", "_tolerance")

    def __init__(self, secrets: str | Iterable[str],
                 tolerance: timedelta = DEFAULT_TOLERANCE) -> None:
        listed = [secrets] if isinstance(secrets, str) else list(secrets)
        if not listed:
            raise ValueError("Verifier needs at least one whsec_ secret")
        if not isinstance(tolerance, timedelta) or tolerance < timedelta(0):
            raise ValueError("tolerance must be a timedelta, not negative")
        self._keys = tuple(dict.fromkeys(_key(s) for s in listed))
        self._tolerance = tolerance.total_seconds()

    def __repr__(self) -> str:  # never the secrets
        return f"Verifier(<{len(self._keys)} secret(s)>, tolerance={self._tolerance:g}s)"

    def verify(self, headers: Headers, body: bytes) -> list[Received]:
        """The events of a delivery, once its signature and timestamp hold.

        Raises :class:`InvalidSignature` (answer 401) or :class:`InvalidDelivery`
        (answer 400).
        """
        return self.verify_at(headers, body, time.time())

    def verify_at(self, headers: Headers, body: bytes, now: float) -> list[Received]:
        """:meth:`verify` with the receiver's clock given as Unix seconds."""
        if not isinstance(body, bytes | bytearray):
            body = bytes(body)
        msg_id = self._check_signature(headers, body, now)
        return _read(headers, body, msg_id)

    def _check_signature(self, headers: Headers, body: bytes, now: float) -> str:
        msg_id = _required(headers, "webhook-id")
        stamp = _required(headers, "webhook-timestamp").strip()
        given = _required(headers, "webhook-signature")
        if not stamp.isascii() or not stamp.isdigit():
            raise InvalidSignature("webhook-timestamp is not a Unix time in whole seconds")
        timestamp = int(stamp)
        if now - timestamp > self._tolerance:
            raise InvalidSignature(f"webhook-timestamp is {now - timestamp:.0f} s old, beyond "
                                   f"the tolerance of {self._tolerance:g} s")
        if timestamp - now > self._tolerance:
            raise InvalidSignature(f"webhook-timestamp is {timestamp - now:.0f} s in the future, "
                                   f"beyond the tolerance of {self._tolerance:g} s")
        digests = []
        for part in given.split():
            version, _, encoded = part.partition(",")
            if version == "v1":
                try:
                    digests.append(binascii.a2b_base64(encoded, strict_mode=True))
                except (binascii.Error, ValueError):
                    continue
        if not digests:
            raise InvalidSignature("webhook-signature holds no v1 signature")
        prefix = b"%s.%d." % (msg_id.encode("utf-8", "surrogateescape"), timestamp)
        matched = False
        for key in self._keys:
            mac = keyed_hmac(key).copy()
            mac.update(prefix)
            mac.update(body)
            expected = mac.digest()
            for digest in digests:
                # Constant time; and every pair is compared, so the time taken
                # does not tell which secret or which signature matched.
                matched |= hmac.compare_digest(expected, digest)
        if not matched:
            raise InvalidSignature("no signature in webhook-signature matches any secret")
        return msg_id


def _read(headers: Headers, body: bytes, msg_id: str) -> list[Received]:
    media = (_header(headers, "content-type") or "").split(";", 1)[0].strip().lower()
    if media == CLOUDEVENTS_BATCH:
        items = _json(body)
        if not isinstance(items, list) or not items:
            raise InvalidDelivery("a CloudEvents batch must be a non-empty JSON array")
        return [_structured(item, f"element {n} of the batch")
                for n, item in enumerate(items, 1)]
    if media == _CE_STRUCTURED:
        return [_structured(_json(body), "the structured event")]
    if _header(headers, "ce-specversion") is not None:
        return [_binary(headers, body, msg_id)]
    parsed = _json(body)
    if isinstance(parsed, list):
        if not parsed:
            raise InvalidDelivery("a batch must hold at least one event")
        return [_webhook(item, f"element {n} of the batch") for n, item in enumerate(parsed, 1)]
    event = _webhook(parsed, "the body")
    if event.id != msg_id:
        raise InvalidDelivery("the body's id differs from the signed webhook-id")
    return [event]


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
                    time=_time(_text(obj, "timestamp", where), where, ": 'timestamp'"))


def _structured(obj: Any, where: str) -> Received:
    if not isinstance(obj, dict):
        raise InvalidDelivery(f"{where} is not a JSON object")
    if obj.get("specversion") != "1.0":
        raise InvalidDelivery(f"{where}: 'specversion' is not '1.0'")
    return Received(id=_text(obj, "id", where), type=_text(obj, "type", where),
                    key=_optional_key(obj, "subject", where), data=obj.get("data"),
                    time=_time(_text(obj, "time", where), where, ": 'time'"))


def _binary(headers: Headers, body: bytes, msg_id: str) -> Received:
    values = {}
    for name in ("ce-specversion", "ce-id", "ce-type", "ce-time"):
        value = _header(headers, name)
        if not value:
            raise InvalidDelivery(f"the {name} header is missing")
        values[name] = value
    if values["ce-specversion"] != "1.0":
        raise InvalidDelivery("ce-specversion is not 1.0")
    if values["ce-id"] != msg_id:
        raise InvalidDelivery("ce-id differs from the signed webhook-id")
    subject = _header(headers, "ce-subject")
    if subject is not None:
        try:
            subject = unquote(subject, errors="strict")
        except UnicodeDecodeError:
            raise InvalidDelivery("ce-subject is not percent-encoded UTF-8") from None
    return Received(id=values["ce-id"], type=values["ce-type"], key=subject,
                    data=_json(body), time=_time(values["ce-time"], "ce-time"))
