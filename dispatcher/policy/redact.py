"""Masking what a receiver echoes back before it becomes ``last_error``.

``last_error`` is built from the receiver's answer, stored, shown by ``outbox
dead list`` and logged at WARNING, so "logs never contain secrets" holds only
if this module finds every secret an answer can carry. A receiver that
echoes our request (a debugging endpoint, a proxy's error page, a framework
dumping what it got) sends back the signature, the ``Authorization`` header
and every custom header, spelled as it happens to serialise them: as sent,
JSON-escaped (``\\/`` for ``/``, as PHP writes it), percent-encoded
(``%2C``, ``%2B``), and cut off wherever the 4 KiB body excerpt ends.

What is masked, in all of those spellings:

- Standard Webhooks signatures ``v1,<base64>``, however short: one cut at
  the excerpt's edge still shows the start of an HMAC;
- ``whsec_`` secrets, and the endpoint's own keys in base64;
- credentials after ``Bearer``, ``Basic`` and ``Token``, of any length,
  unless the next word is one that follows these words in prose ("bearer
  token required" stays readable);
- the value after a header name that carries credentials (``authorization``,
  ``cookie``, ``x-api-key``, ``webhook-signature``...) or after the name of
  any custom header the request carried (endpoint or event), written
  ``name: value``, ``"name": "value"`` or ``name=value``;
- the endpoint's ``--header`` values (where credentials are configured)
  wherever they appear, from 4 characters (shorter ones would mask ordinary
  words), and the start of one cut off at the end of the text. Event header
  values are masked only after their name: they are mostly routing data
  (a tenant, a trace id) that makes an error readable;
- the payloads of the request's events (its data, which only the
  dispatcher's DEBUG log may show), plain or JSON-escaped, from 4
  characters, and the start of one cut off at the end of the text; and,
  for a receiver that parsed the payload and wrote it again (Python's
  ``json.dumps`` spacing, pretty-printed, a ``repr``, a form), every string
  and number value in it (not its keys) of 4 characters or more, however
  spelled: as it is, JSON- or double-JSON-escaped, in a Python ``repr``,
  percent- or form-encoded, HTML-escaped, and the start of one cut off at
  the end. Values in the first 8 KiB of the request's payloads are looked
  for: an answer's excerpt is 4 KiB, so an echo in the request's order can
  reach no further;
- the values of the endpoint URL's query (``?token=...``): after their
  name, and wherever they appear from 4 characters.

The header values and keys are those of the endpoint the policy is already
handed for the attempt; they are only compared with the text here and never
leave this module, so masking them adds no place where a secret is kept.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, quote_plus

from dispatcher.policy.model import Delivery, Endpoint
from outbox._shared.urls import query_parts

REDACTED: Final = "[redacted]"
ECHO_ROOM: Final = 8192
"""An answer's excerpt is 4 KiB: a batch's payloads past the first 8 KiB of them cannot
be echoed in it, so they are not looked for (a batch may carry a thousand)."""
MIN_LITERAL: Final = 4
"""Custom header values shorter than this are masked only after their header's name."""

# '/' and '+' as JSON (PHP's "\/", "\u002b") or percent-encoding spell them.
_ESCAPED: Final = r"(?:\\/|\\u002[bBfF]|%2[bBfF])"
_B64: Final = rf"(?:[A-Za-z0-9+/]|{_ESCAPED})"
_PAD: Final = r"(?:=|%3[dD]|\\u003[dD])"
_COMMA: Final = r"(?:,|%2[cC]|\\u002[cC])"
_PATTERNS: Final = re.compile(
    rf"v1{_COMMA}{_B64}+{_PAD}*"  # a signature, whole or cut short
    rf"|whsec_{_B64}+{_PAD}*"  # a secret
)
# A JSON string (with the colon after it when it is a key) or a JSON number.
_TOKEN: Final = re.compile(r'"(?:[^"\\\r\n]|\\.)*"(?P<key>\s*:)?'
                           r"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
# Characters that JSON, repr, percent- and HTML-escaping all leave as they are (but space).
_PLAIN: Final = re.compile(r"[A-Za-z0-9_.~ -]*")
_PLAIN_START: Final = re.compile(r"[A-Za-z0-9_.~-]*")  # and spelled alike from the start
_CREDENTIAL: Final = re.compile(
    rf"\b(?P<scheme>(?i:bearer|basic|token))(?P<sep>[ \t]+|%20|\+)"
    rf"(?P<credential>(?:[A-Za-z0-9\-._~+/]|{_ESCAPED})+{_PAD}*)"  # RFC 9110 token68
)
# Words that follow "bearer", "basic" or "token" in an error message, not credentials.
_PROSE: Final = frozenset({
    "and", "auth", "authentication", "authorization", "credential", "credentials", "expired",
    "for", "has", "header", "in", "invalid", "is", "missing", "mismatch", "must", "not", "of",
    "or", "realm", "required", "scheme", "to", "token", "tokens", "was", "with"})
# Header names whose value is a credential whatever the endpoint sends.
_SENSITIVE_NAMES: Final = ("authorization", "proxy-authorization", "cookie", "set-cookie",
                           "x-api-key", "api-key", "apikey", "x-auth-token",
                           "webhook-signature")
# After a name: a quoted value (JSON, escaped JSON, Python's repr; the first
# of a list, as Go serialises headers), or the rest of the line (a header
# line, up to '&' in a query string).
_NAMED_VALUE: Final = (r"(?P<sep>\\?[\"']?[ \t]*[:=][ \t]*(?:\[[ \t]*(?=[\"'\\]))?)"
                       r"(?P<value>\\\"(?:[^\"\\\r\n]|\\[^\"\r\n])*(?:\\\")?"  # in a JSON string
                       r"|\"(?:[^\"\\\r\n]|\\.)*\"?"  # JSON
                       r"|'[^'\r\n]*'?|[^\r\n&]*)")


@dataclass(frozen=True, slots=True)
class Sent:
    """What a request carried that its answer must not repeat."""

    names: tuple[str, ...] = ()  # custom header names, the endpoint's and the event's
    values: tuple[str, ...] = ()  # the endpoint's --header values, where credentials live
    keys: tuple[bytes, ...] = ()  # the endpoint's signing keys
    payloads: tuple[str, ...] = ()  # the events' payloads (JSON text), one or a batch's
    params: tuple[str, ...] = ()  # the names in the endpoint URL's query

    @classmethod
    def of(cls, endpoint: Endpoint, delivery: Delivery,
           batch: Iterable[Delivery] = ()) -> Sent:
        """What the request for ``delivery`` (and the rest of its ``batch``) carried."""
        payloads = [delivery.event.payload]
        room = ECHO_ROOM
        for other in batch:  # in the order the request carried them
            if room <= 0:
                break
            if other is not delivery:
                payloads.append(other.event.payload)
            room -= len(other.event.payload)
        query_names, query_values = query_parts(endpoint.url)
        # In a canonical order: the deliveries of one request then make equal Sents,
        # and the text of their common answer is masked once (see redact).
        return cls(_canonical((*endpoint.headers, *delivery.event.headers)),
                   _canonical((*endpoint.headers.values(), *query_values)), endpoint.keys,
                   _canonical(payloads), query_names)


def _canonical(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(items)))


def redact(text: str, sent: Sent | None = None) -> str:
    """``text`` with every secret it may echo masked; ``sent`` adds the request's own."""
    return _redact(text, sent or Sent())


# A request's deliveries are decided one after the other, on one answer: when
# their Sents are equal the first pays for the masking and the others find it
# here. Small, as it holds on to the payloads.
@functools.lru_cache(maxsize=4)
def _redact(text: str, sent: Sent) -> str:
    # No more of a payload than the text holds can appear in it: the spellings of
    # a 1 MiB payload are made of its start only.
    literals = _literals(sent.values, sent.keys, (p[:len(text)] for p in sent.payloads))
    # A payload's values come in thousands of spellings: only those whose first
    # characters the text holds at all are looked for.
    grams = {text[i:i + MIN_LITERAL] for i in range(len(text) - MIN_LITERAL + 1)}
    values = {spelling for payload in sent.payloads
              for leaf in _leaves(payload[:min(len(text), ECHO_ROOM)])
              if leaf[:MIN_LITERAL] in grams or not _PLAIN_START.fullmatch(leaf[:MIN_LITERAL])
              for spelling in _leaf_spellings(leaf) if spelling[:MIN_LITERAL] in grams}
    literals = sorted({*literals, *values}, key=len, reverse=True)
    for literal in literals:
        text = text.replace(literal, REDACTED)
    text = _mask_cut_literal(text, literals)
    text = _named((*_SENSITIVE_NAMES, *sent.names)).sub(_mask_value, text)
    if sent.params:
        text = _param(sent.params).sub(rf"\g<name>={REDACTED}", text)
    text = _PATTERNS.sub(REDACTED, text)
    return _CREDENTIAL.sub(_mask_credential, text)


@functools.lru_cache(maxsize=256)
def _leaves(head: str) -> tuple[str, ...]:
    """The string and number values of 4 characters or more in a payload's start.

    Read by a tokenizer, not a parser: a payload cut short is no longer
    JSON, and a megabyte one would cost a parse per failed attempt. Cached:
    the payloads of a batch are asked for once per delivery in it.
    """
    leaves: set[str] = set()
    for match in _TOKEN.finditer(head):
        token = match[0]
        if match["key"] is not None or len(token) < MIN_LITERAL:
            continue
        if token.startswith('"'):
            with contextlib.suppress(ValueError):
                leaves.add(json.loads(token))
        else:  # a number, as written and as a parser writes it again
            leaves.add(token)
            with contextlib.suppress(ValueError, OverflowError):
                number = float(token)
                integral = number.is_integer() and not any(c in token for c in ".eE")
                leaves.add(repr(int(number)) if integral else repr(number))
    return tuple(leaf for leaf in leaves if len(leaf) >= MIN_LITERAL)


@functools.lru_cache(maxsize=4096)
def _leaf_spellings(value: str) -> frozenset[str]:
    """How a serialiser may write a payload's string value again."""
    if _PLAIN.fullmatch(value):  # the common case, spelled alike by all but for its spaces
        return frozenset((value, value.replace(" ", "%20"), value.replace(" ", "+")))
    escaped = json.dumps(value)[1:-1]
    unicode = json.dumps(value, ensure_ascii=False)[1:-1]
    return frozenset((value, escaped, unicode, escaped.replace("/", "\\/"),
                      json.dumps(escaped)[1:-1], json.dumps(unicode, ensure_ascii=False)[1:-1],
                      repr(value)[1:-1], quote(value, safe=""), quote(value),
                      quote_plus(value, safe=""), html.escape(value)))


def _literals(values: Iterable[str], keys: Iterable[bytes],
              payloads: Iterable[str] = ()) -> list[str]:
    """The spellings of header values, keys and payloads an echo may use, longest first."""
    plain: set[str] = set()
    for given in values:
        value = given.strip()
        plain.add(value)
        plain.add(value.rsplit(None, 1)[-1] if value else value)  # the credential of "Basic x"
    plain.update(base64.b64encode(key).decode("ascii").rstrip("=") for key in keys)
    spelled: set[str] = set()
    for value in plain:
        escaped = json.dumps(value)[1:-1]
        spelled.update((value, escaped, escaped.replace("/", "\\/"), quote(value, safe=""),
                        quote_plus(value, safe="")))
    for payload in payloads:  # JSON text: echoed as it is, or inside a JSON string
        escaped = json.dumps(payload, ensure_ascii=False)[1:-1]
        spelled.update((payload, escaped, escaped.replace("/", "\\/")))
    return sorted((s for s in spelled if len(s) >= MIN_LITERAL), key=len, reverse=True)


def _mask_cut_literal(text: str, literals: Iterable[str]) -> str:
    """Mask the start of a literal that the excerpt cut off at the end of ``text``."""
    for literal in literals:
        tail = text[-(len(literal) - 1):]
        start = tail.find(literal[:MIN_LITERAL])
        while start != -1:
            if literal.startswith(tail[start:]):
                return text[:len(text) - len(tail) + start] + REDACTED
            start = tail.find(literal[:MIN_LITERAL], start + 1)
    return text


def _named(names: Iterable[str]) -> re.Pattern[str]:
    alternatives = "|".join(sorted({re.escape(n.lower()) for n in names}, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?P<name>{alternatives}){_NAMED_VALUE}", re.IGNORECASE)


def _param(names: Iterable[str]) -> re.Pattern[str]:
    """``name=value`` of the URL's query, as a request line or a logged URL shows it."""
    alternatives = "|".join(sorted({re.escape(n) for n in names}, key=len, reverse=True))
    return re.compile(rf"(?<![\w%.-])(?P<name>{alternatives})=[^\s&\"'<>#\\]+")


def _mask_value(match: re.Match[str]) -> str:
    value = match["value"]
    if not value or value == REDACTED:
        return match[0]
    quote_char = '"' if value.lstrip("\\").startswith('"') else "'" if value[0] == "'" else ""
    if quote_char:
        opening = value[: value.index(quote_char) + 1]
        return f"{match['name']}{match['sep']}{opening}{REDACTED}{opening}"
    return f"{match['name']}{match['sep']}{REDACTED}"


def _mask_credential(match: re.Match[str]) -> str:
    if match["credential"].lower().rstrip(".=") in _PROSE:
        return match[0]
    return f"{match['scheme']}{match['sep']}{REDACTED}"
