"""The values of a request's payloads, in the spellings a receiver may echo them.

A receiver that rejects a field quotes it (FastAPI's 422 says ``"input":
"078-05-1120"``), one that parsed the payload writes it again in its own
spacing, quoting or encoding: either way a value can come back anywhere in
the answer, whatever its place in the payload. So every string and number
value (never a key) of 4 characters or more is looked for wherever it may
stand in the answer, for the first :data:`ROOM_EACH` of each payload, up to
:data:`ROOM` of the request's in all, in the order they were sent.

The cost is bounded by those rooms, not by the payloads (up to 4 MiB each):
a tokenizer reads each payload's start once (cached, since a request's
deliveries are decided one after the other), and the answer's 4-grams
choose the few values worth spelling out: a value whose first 4 characters
the answer does not hold at all cannot be in it.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, quote_plus

MIN_LITERAL: Final = 4
"""Values shorter than this are not masked: they would mask ordinary words and numbers."""
ROOM_EACH: Final = 64 * 1024
"""The characters of one payload whose values are looked for."""
ROOM: Final = 256 * 1024
"""The characters of a request's payloads (a batch's, in the order sent) looked for in all."""

# A JSON string (with the colon after it when it is a key) or a JSON number; the string's
# loop unrolled, which reads a payload about four times faster than an alternation does.
_TOKEN: Final = re.compile(r'"[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*"(?P<key>\s*:)?'
                           r"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
# Characters that JSON, repr, percent- and HTML-escaping all leave as they are (but space).
_PLAIN: Final = re.compile(r"[A-Za-z0-9_.~ -]*")
_PLAIN_START: Final = re.compile(r"[A-Za-z0-9_.~-]*")  # and spelled alike from the start


def heads(payloads: Iterable[str]) -> list[str]:
    """The parts of ``payloads`` (a request's, in order) whose values are looked for."""
    found: list[str] = []
    room = ROOM
    for payload in payloads:
        if room <= 0:
            break
        head = payload[:min(ROOM_EACH, room)]  # no copy when the payload fits
        found.append(head)
        room -= len(head)
    return found


def grams(text: str) -> frozenset[str]:
    """Every run of :data:`MIN_LITERAL` characters in ``text``."""
    return frozenset(text[i:i + MIN_LITERAL] for i in range(len(text) - MIN_LITERAL + 1))


def spellings(payload_heads: Iterable[str], text_grams: frozenset[str]) -> set[str]:
    """The spellings of the heads' values that may stand in a text of ``text_grams``."""
    found: set[str] = set()
    for head in payload_heads:
        by_start = _leaves(head)
        for gram in text_grams & by_start.keys():
            for leaf in by_start[gram]:
                found.update(s for s in _leaf_spellings(leaf) if s[:MIN_LITERAL] in text_grams)
    return found


@functools.lru_cache(maxsize=16)
def _leaves(head: str) -> dict[str, tuple[str, ...]]:
    """The string and number values of 4 characters or more in a payload's start, by the
    first 4 characters of their spellings.

    Read by a tokenizer, not a parser: a payload cut short is no longer JSON.
    Cached: a batch's deliveries are decided on one answer, and a retry
    carries the same payloads. Small: a head's values may take some times its size.
    """
    leaves: set[str] = set()
    for match in _TOKEN.finditer(head):
        token = match[0]
        if match["key"] is not None or len(token) < MIN_LITERAL:
            continue
        if token[0] == '"':
            if "\\" not in token:
                leaves.add(token[1:-1])
                continue
            with contextlib.suppress(ValueError):
                leaves.add(json.loads(token))
        else:  # a number, as written and as a parser writes it again
            leaves.add(token)
            with contextlib.suppress(ValueError, OverflowError):
                number = float(token)
                integral = number.is_integer() and not any(c in token for c in ".eE")
                leaves.add(repr(int(number)) if integral else repr(number))
    by_start: dict[str, list[str]] = {}
    for leaf in leaves:
        if len(leaf) < MIN_LITERAL:
            continue
        start = leaf[:MIN_LITERAL]
        for gram in (start,) if _PLAIN_START.fullmatch(start) else _starts(start):
            by_start.setdefault(gram, []).append(leaf)
    return {gram: tuple(found) for gram, found in by_start.items()}


@functools.lru_cache(maxsize=4096)
def _starts(start: str) -> frozenset[str]:
    """The first 4 characters of every spelling of a value that begins with ``start``.

    Every spelling escapes character by character, so a value's first 4
    characters decide those of each of its spellings; but for ``repr``,
    whose quotes depend on the whole value: it escapes ``'`` when the value
    holds ``"`` too, the second spelling here.
    """
    both_quotes = repr(start + "'\"")[1:-1]
    return frozenset(s[:MIN_LITERAL] for s in (*_every_spelling(start), both_quotes))


@functools.lru_cache(maxsize=4096)
def _leaf_spellings(value: str) -> frozenset[str]:
    """How a serialiser may write a payload's string value again, from 4 characters."""
    if _PLAIN.fullmatch(value):  # the common case, spelled alike by all but for its spaces
        return frozenset((value, value.replace(" ", "%20"), value.replace(" ", "+")))
    return frozenset(s for s in _every_spelling(value) if len(s) >= MIN_LITERAL)


def _every_spelling(value: str) -> tuple[str, ...]:
    """``value`` as JSON (ASCII or not, ``/`` escaped or not, twice over), in a
    Python ``repr``, percent-, form- and HTML-encoded."""
    escaped = json.dumps(value)[1:-1]
    unicode = json.dumps(value, ensure_ascii=False)[1:-1]
    return (value, escaped, unicode, escaped.replace("/", "\\/"),
            json.dumps(escaped)[1:-1], json.dumps(unicode, ensure_ascii=False)[1:-1],
            repr(value)[1:-1], quote(value, safe=""), quote(value),
            quote_plus(value, safe=""), html.escape(value))
