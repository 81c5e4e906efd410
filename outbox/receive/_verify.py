"""Verifier: a request's size, signature and timestamp checked, its body read into events.

Pure: no I/O. The clock is read once per call (``time.time()``) and handed to
:meth:`Verifier.verify_at`, which tests and benchmarks may call with a time
of their own. The checks run cheapest first, each before any work the next
one costs: the body's size (``max_body``), then the headers' shape (a
``webhook-timestamp`` is a decimal of at most 12 digits, read as no other
number), then the HMAC over the body, and only then is the body parsed, in
the one format the verifier was made for (``outbox.receive._formats``): an
unsigned header never chooses how a signed body is read.
"""

from __future__ import annotations

import binascii
import hmac
import re
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Final

from outbox._shared.endpoint_defaults import FORMATS, Format
from outbox._shared.wire import keyed_hmac, secret_key, signed_prefix
from outbox.errors import InvalidDelivery, InvalidSignature
from outbox.receive._formats import Headers, Received, header, read

DEFAULT_TOLERANCE: Final = timedelta(minutes=5)
DEFAULT_MAX_BODY: Final = 5 * 1024 * 1024
"""Bytes of body a verifier reads by default: more than a batch of the dispatcher, whose
payloads come to at most 4 MiB, with their envelopes."""
# Unix seconds: 12 digits reach the year 33658. A longer value is no time the
# dispatcher writes, and int() of thousands of digits is slow or refused.
_TIMESTAMP: Final = re.compile(r"[0-9]{1,12}")


def _required(headers: Headers, name: str) -> str:
    value = header(headers, name)
    if not value:
        raise InvalidSignature(f"the {name} header is missing")
    return value


class Verifier:
    """Checks deliveries signed with any of ``secrets`` (``whsec_...``; several while rotating).

    ``tolerance`` bounds how far ``webhook-timestamp`` (the attempt's time) may
    be from the receiver's clock, in the past or the future: a request
    captured and replayed later is refused. ``format`` is the one the
    endpoint sends (``standard-webhooks`` or ``cloudevents``): a request in
    the other, or mixing both, is refused. ``max_body`` bounds the body in
    bytes, refused before any signature is computed over it.
    """

    __slots__ = ("_format", "_keys", "_max_body", "_tolerance")

    def __init__(self, secrets: str | Iterable[str],
                 tolerance: timedelta = DEFAULT_TOLERANCE, *,
                 format: Format = "standard-webhooks",
                 max_body: int = DEFAULT_MAX_BODY) -> None:
        listed = [secrets] if isinstance(secrets, str) else list(secrets)
        if not listed:
            raise ValueError("Verifier needs at least one whsec_ secret")
        if not isinstance(tolerance, timedelta) or tolerance < timedelta(0):
            raise ValueError("tolerance must be a timedelta, not negative")
        if format not in FORMATS:
            raise ValueError(f"format must be {' or '.join(map(repr, FORMATS))}, "
                             f"not {format!r}")
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
            raise ValueError(f"max_body must be a whole number of bytes, 1 or more, "
                             f"not {max_body!r}")
        self._keys = tuple(dict.fromkeys(secret_key(s) for s in listed))
        self._tolerance = tolerance.total_seconds()
        self._format: Format = format
        self._max_body = max_body

    def __repr__(self) -> str:  # never the secrets
        return (f"Verifier(<{len(self._keys)} secret(s)>, tolerance={self._tolerance:g}s, "
                f"format={self._format!r}, max_body={self._max_body})")

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
        if len(body) > self._max_body:
            raise InvalidDelivery(f"the body holds {len(body)} bytes, more than the "
                                  f"verifier's max_body of {self._max_body}")
        msg_id = self._check_signature(headers, body, now)
        return read(self._format, headers, body, msg_id)

    def _check_signature(self, headers: Headers, body: bytes, now: float) -> str:
        msg_id = _required(headers, "webhook-id")
        stamp = _required(headers, "webhook-timestamp").strip()
        given = _required(headers, "webhook-signature")
        if _TIMESTAMP.fullmatch(stamp) is None:
            raise InvalidSignature("webhook-timestamp is not a Unix time in whole seconds "
                                   "(a decimal of at most 12 digits)")
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
        prefix = signed_prefix(msg_id, timestamp)
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
