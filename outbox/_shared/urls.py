"""Endpoint URLs as they may be shown: query values and user information masked.

An endpoint's URL is configuration, not a secret, but receivers that take a
token in the query (``?token=...``) or, against our advice, credentials
before the host make parts of it one. Wherever a URL is printed or logged
(``outbox endpoints list``, ``add``, error messages), :func:`shown_url`
gives it with every query value and any user information replaced by
``***``; :func:`query_parts` gives the dispatcher the names and values to
mask in what a receiver echoes back.
"""

from __future__ import annotations

from urllib.parse import unquote_plus

MASK = "***"


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
    """``url`` with each query value, user information and fragment replaced by ``***``."""
    scheme, authority, path, query = _split(url)
    if "@" in authority:
        authority = f"{MASK}@{authority.rsplit('@', 1)[1]}"
    host, colon, port = authority.rpartition(":")
    if colon and "]" not in port and not port.isdigit():  # http://admin:S3cret/ is no port
        authority = f"{host}:{MASK}"
    shown = scheme + authority + path
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
