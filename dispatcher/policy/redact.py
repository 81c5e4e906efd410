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
  for a receiver that quotes a field it refused (a framework's validation
  error) or parsed the payload and wrote it again (Python's ``json.dumps``
  spacing, pretty-printed, a ``repr``, a form), every string and number
  value in it (not its keys) of 4 characters or more, wherever it stands
  in the answer and however spelled: as it is, JSON- or double-JSON-escaped,
  in a Python ``repr``, percent- or form-encoded, HTML-escaped, and the
  start of one cut off at the end. Values in the first 64 KiB of each
  payload, 256 KiB of the request's in all, are looked for (see
  ``policy.payload_values``);
- the values of the endpoint URL's query (``?token=...``): after their
  name, and wherever they appear from 4 characters; and the path segments
  of the URL that look like a token (a Slack-style ``/services/T0/B0/<token>``,
  see ``outbox._shared.urls``), wherever they appear.

The header values and keys are those of the endpoint the policy is already
handed for the attempt; they are only compared with the text here and never
leave this module, so masking them adds no place where a secret is kept.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, quote_plus

from dispatcher.policy import payload_values
from dispatcher.policy.model import Delivery, Endpoint
from dispatcher.policy.payload_values import MIN_LITERAL
from outbox._shared.urls import query_parts, token_segments

REDACTED: Final = "[redacted]"
# '/' and '+' as JSON (PHP's "\/", "\u002b") or percent-encoding spell them.
_ESCAPED: Final = r"(?:\\/|\\u002[bBfF]|%2[bBfF])"
_B64: Final = rf"(?:[A-Za-z0-9+/]|{_ESCAPED})"
_PAD: Final = r"(?:=|%3[dD]|\\u003[dD])"
_COMMA: Final = r"(?:,|%2[cC]|\\u002[cC])"
_PATTERNS: Final = re.compile(
    rf"v1{_COMMA}{_B64}+{_PAD}*"  # a signature, whole or cut short
    rf"|whsec_{_B64}+{_PAD}*"  # a secret
)
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
    payloads: tuple[str, ...] = ()  # the events' payloads (JSON text) in the request's order
    params: tuple[str, ...] = ()  # the names in the endpoint URL's query

    @classmethod
    def of(cls, endpoint: Endpoint, delivery: Delivery,
           batch: Iterable[Delivery] = ()) -> Sent:
        """What the request for ``delivery`` (and the rest of its ``batch``) carried.

        Every delivery of one request gets an equal Sent (the payloads in the
        order sent, as far as ``payload_values.heads`` looks), so the text of
        their common answer is masked once (see redact).
        """
        sent = list(batch)
        if not any(other is delivery for other in sent):
            sent.insert(0, delivery)
        payloads = tuple(payload_values.heads(other.event.payload for other in sent))
        query_names, query_values = query_parts(endpoint.url)
        return cls(_canonical((*endpoint.headers, *delivery.event.headers)),
                   _canonical((*endpoint.headers.values(), *query_values,
                               *token_segments(endpoint.url))),
                   endpoint.keys, payloads, query_names)


def _canonical(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(items)))


def redact(text: str, sent: Sent | None = None) -> str:
    """``text`` with every secret it may echo masked; ``sent`` adds the request's own."""
    return _redact(text, sent or Sent())


# A request's deliveries are decided one after the other, on one answer: their
# Sents are equal, the first pays for the masking and the others find it here.
# Small, as it holds on to the payloads.
@functools.lru_cache(maxsize=4)
def _redact(text: str, sent: Sent) -> str:
    grams = payload_values.grams(text)
    heads = payload_values.heads(sent.payloads)
    # An echo of a payload as sent starts where it starts: no more of it than the
    # text holds can appear.
    literals = {s for s in _literals(sent.values, sent.keys, (h[:len(text)] for h in heads))
                if s[:MIN_LITERAL] in grams}
    literals |= payload_values.spellings(heads, grams)
    longest_first = sorted(literals, key=len, reverse=True)
    text = _mask_cut_literal(_mask_everywhere(text, longest_first), longest_first)
    text = _named((*_SENSITIVE_NAMES, *sent.names)).sub(_mask_value, text)
    if sent.params:
        text = _param(sent.params).sub(rf"\g<name>={REDACTED}", text)
    text = _PATTERNS.sub(REDACTED, text)
    return _CREDENTIAL.sub(_mask_credential, text)


def _mask_everywhere(text: str, literals: Iterable[str]) -> str:
    """``text`` with every place any of ``literals`` stands masked, once, overlaps merged.

    All are looked for in the text as it came (not one after the other in a
    text already part masked), so two that overlap leave nothing of either.
    """
    spans: list[tuple[int, int]] = []
    for literal in literals:
        start = text.find(literal)
        while start != -1:
            spans.append((start, start + len(literal)))
            start = text.find(literal, start + len(literal))
    if not spans:
        return text
    spans.sort()
    parts: list[str] = []
    shown = 0  # text[:shown] is done with
    for start, end in spans:
        if start > shown:
            parts += [text[shown:start], REDACTED]
        elif not parts:
            parts.append(REDACTED)
        shown = max(shown, end)
    parts.append(text[shown:])
    return "".join(parts)


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
