"""Endpoint URLs as they may be shown: query values, path tokens and user information masked.

An endpoint's URL is configuration, not a secret, but receivers that take a
token in the query (``?token=...``) or in the path (Slack-style hooks,
``/services/T0001/B0001/<24 random characters>``) or, against our advice,
credentials before the host make parts of it one. Wherever a URL is printed
or logged (``outbox endpoints list``, ``show``, ``add``, error messages),
:func:`shown_url` gives it with every query value and any user information
replaced by ``***``, and every path segment that looks like a token cut to
its first 4 characters and ``***`` (enough to tell two hooks apart);
:func:`query_parts` and :func:`token_segments` give the dispatcher what to
mask in what a receiver echoes back.

A path segment looks like a token when it has 16 characters or more and
is not made of lower-case words (``order-created-events``,
``incoming_webhooks``): a digit, a capital or any other character in so
long a segment is what random identifiers and keys are made of. An
ordinary segment masked by this rule costs some readability, never a
secret.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote, unquote_plus

MASK = "***"
TOKEN_SEGMENT_LENGTH: Final = 16
"""Path segments this long or longer are masked unless made of lower-case words."""
SHOWN_PREFIX: Final = 4
"""A masked path segment keeps this many of its first characters."""
_WORDS: Final = re.compile(r"[a-z]+(?:[-_.][a-z]+)*")


def _split(url: str) -> tuple[str, str, str, str]:
    """Scheme with ``//``, authority, path, and query (fragment dropped), by hand: a
    malformed URL must still be shown masked."""
    rest = url.split("#", 1)[0]
    scheme, sep, after = rest.partition("//")
    if not sep:
        scheme, after = "", rest
    else:
        scheme += sep
    authority, slash, tail = after.partition("/")
    path = slash + tail
    if "?" in authority:  # http://host?query
        authority, query_mark, more = authority.partition("?")
        path = query_mark + more + path
    path, _, query = path.partition("?")
    return scheme, authority, path, query


def shown_url(url: str) -> str:
    """``url`` with each query value, user information and fragment replaced by ``***``,
    and each path segment that looks like a token by its first 4 characters and ``***``."""
    scheme, authority, path, query = _split(url)
    if "@" in authority:
        authority = f"{MASK}@{authority.rsplit('@', 1)[1]}"
    host, colon, port = authority.rpartition(":")
    if colon and "]" not in port and not port.isdigit():  # http://admin:S3cret/ is no port
        authority = f"{host}:{MASK}"
    shown = scheme + authority + "/".join(
        segment[:SHOWN_PREFIX] + MASK if _is_token(segment) else segment
        for segment in path.split("/"))
    if query or "?" in url:
        parts = []
        for part in query.split("&"):
            name, eq, value = part.partition("=")
            if eq:
                parts.append(f"{name}={MASK}" if value else f"{name}=")
            else:  # a bare ?token: the whole part may be the secret
                parts.append(MASK if part else "")
        shown += "?" + "&".join(parts)
    if "#" in url:
        shown += "#" + MASK
    return shown


def query_parts(url: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names and the values of ``url``'s query, each value as written and decoded."""
    names: list[str] = []
    values: list[str] = []
    for part in _split(url)[3].split("&"):
        if not part:
            continue
        name, eq, value = part.partition("=")
        if not eq:
            name, value = "", name
        if name:
            names.append(unquote_plus(name))
        if value:
            values += dict.fromkeys((value, unquote_plus(value)))
    return tuple(dict.fromkeys(names)), tuple(values)


def token_segments(url: str) -> tuple[str, ...]:
    """The path segments of ``url`` that look like a token, each as written and decoded."""
    found: dict[str, None] = {}
    for segment in _split(url)[2].split("/"):
        if _is_token(segment):
            found |= dict.fromkeys((segment, unquote(segment)))
    return tuple(found)


def _is_token(segment: str) -> bool:
    return len(segment) >= TOKEN_SEGMENT_LENGTH and not _WORDS.fullmatch(segment)
