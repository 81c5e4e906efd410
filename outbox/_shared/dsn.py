"""Finding the database: ``--dsn``, then ``OUTBOX_DSN``, ``DATABASE_URL``, libpq's ``PG*``.

A malformed connection string is refused before any connection is tried, so
that both commands can call it bad usage (exit 2) rather than an outage.

The refusal never repeats a password. libpq quotes the part it could not
read, and that part may be the password itself (a bad percent-escape in
``postgresql://u:p%zz@h/db``), the whole URL (an unclosed ``[`` of an IPv6
host), or words of a password left unquoted (``password=my secret``, where
libpq complains of the option ``secret``). So before libpq's text is shown,
every quoted part of it that overlaps a password-looking part of the string
is masked: a URL's user information, and everything after the word
``password`` (``sslpassword`` too). If a password is still found in the text
after that, none of libpq's text is shown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

import psycopg

from outbox._shared.search_path import STARTUP_OPTION
from outbox._shared.text import first_line

_URL_SCHEMES = ("postgresql://", "postgres://")
_PASSWORD_WORD = re.compile(r"password", re.IGNORECASE)
# A password's value: quoted in a key=value string, or up to a space or the
# next URL query parameter.
_PASSWORD_VALUE = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s&]*)", re.IGNORECASE)
_PORT = re.compile(r"\s*\+?[0-9]{1,5}\s*")  # as libpq reads it: strtol, then 1-65535
_QUOTED = re.compile(r'"([^"]*)"')
# Separators libpq quotes in its own words ('missing "=" after ...'), never the user's text.
_LIBPQ_QUOTES = frozenset({"=", ":", "/", "]"})
_OVERLAP = 4  # a quoted part sharing this many characters in a row with a password is masked
_MASK = '"***"'


KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                              "keepalives_count": 3}
"""libpq's TCP keepalives for the command's and the web view's connections: a peer gone
without a word (a NAT's timeout, a failed-over server) is noticed in about a minute
rather than the kernel's two hours."""


class InvalidDsn(ValueError):
    """The connection string cannot be parsed; the message says why."""


def resolve_dsn(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """--dsn, else OUTBOX_DSN, else DATABASE_URL, else "" (libpq's PG* variables).

    SQLAlchemy-style URLs (``postgresql+psycopg://``) are accepted and reduced
    to what libpq understands, since DATABASE_URL is often written for an ORM.
    """
    env = os.environ if environ is None else environ
    dsn = flag or env.get("OUTBOX_DSN") or env.get("DATABASE_URL") or ""
    scheme, sep, rest = dsn.partition("://")
    if sep and "+" in scheme:
        dsn = scheme.split("+", 1)[0] + "://" + rest
    if dsn.startswith("postgres://"):
        dsn = "postgresql://" + dsn[len("postgres://"):]
    return dsn


_LIBPQ_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE",
                    "PGSERVICEFILE")


def nothing_configured(dsn: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A hint when no database was named anywhere (libpq then tries its local socket)."""
    env = os.environ if environ is None else environ
    if dsn or any(env.get(name) for name in _LIBPQ_VARIABLES):
        return None
    return ("no database is configured: give --dsn, or set OUTBOX_DSN (or DATABASE_URL, "
            "or libpq's PG* variables)")


def server_options(dsn: str, ours: str = "") -> str:
    """The DSN's own ``options`` (server settings) with the pinned search_path and ``ours``
    after.

    Passing ``options=`` to a connect call replaces the DSN's; this keeps both,
    ours last so that they win where they overlap. A search_path the DSN gives
    is overruled: see :mod:`outbox._shared.search_path`.
    """
    theirs = psycopg.conninfo.conninfo_to_dict(dsn).get("options") or ""
    return f"{theirs} {STARTUP_OPTION} {ours}".strip()


def check_dsn(dsn: str) -> None:
    """Raise InvalidDsn for a connection string libpq cannot parse (bad usage, not an outage).

    A port that is not a number is refused here too: libpq reads ports only
    when it connects, which the dispatcher would take for an outage and retry
    forever.
    """
    scheme, sep, _ = dsn.partition("://")
    if sep and scheme.lower() not in ("postgresql", "postgres") and scheme.isidentifier():
        raise InvalidDsn(f"invalid database URL: the scheme {scheme + '://'!r} is not "
                         "PostgreSQL's: give a postgresql:// URL or libpq's key=value form")
    try:
        options = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidDsn(f"invalid database URL or DSN: {_masked(first_line(exc), dsn)}",
                         ) from None
    except UnicodeError:  # undecodable bytes from the command line or the environment
        raise InvalidDsn("invalid database URL or DSN: it is not valid UTF-8") from None
    for port in str(options.get("port") or "").split(","):
        if port and not (_PORT.fullmatch(port) and 1 <= int(port) <= 65535):
            problem = f'port "{port}" is not a number from 1 to 65535'
            raise InvalidDsn(f"invalid database URL or DSN: {_masked(problem, dsn)}")


def _sensitive_parts(dsn: str) -> tuple[list[str], list[str]]:
    """(regions, passwords): password-looking stretches of ``dsn``, and the values in them.

    Regions are generous on purpose (a URL's whole user information, the
    rest of the string after ``password``): masking a harmless word costs
    less than showing a password that was mistyped into the wrong shape.
    """
    regions: list[str] = []
    passwords: list[str] = []
    if dsn.startswith(_URL_SCHEMES):
        rest = dsn.partition("://")[2]
        userinfo = rest[:rest.rfind("@")] if "@" in rest else ""
        if userinfo:
            regions.append(userinfo)
            password = userinfo.partition(":")[2]
            passwords += [password, unquote(password)]
    word = _PASSWORD_WORD.search(dsn)
    if word:
        regions.append(dsn[word.end():])
        for match in _PASSWORD_VALUE.finditer(dsn):
            value = match.group(1)
            passwords += [value, value.strip("'"), unquote(value)]
    return [r for r in regions if r], [p for p in passwords if p]


def _overlaps(quoted: str, region: str) -> bool:
    if quoted in region or region in quoted:
        return True
    return any(region[i:i + _OVERLAP] in quoted for i in range(len(region) - _OVERLAP + 1))


def _masked(text: str, dsn: str) -> str:
    """libpq's ``text`` about ``dsn`` with every quoted part that may hold a password masked."""
    regions, passwords = _sensitive_parts(dsn)
    if not regions:
        return text

    def mask(match: re.Match[str]) -> str:
        quoted = match.group(1)
        if quoted and quoted not in _LIBPQ_QUOTES and any(
                _overlaps(quoted, region) for region in regions):
            return _MASK
        return match.group(0)

    text = _QUOTED.sub(mask, text)
    if any(password in text for password in passwords):
        return "the reason is not shown, since it would repeat the password"
    return text


def without_passwords(text: str, dsns: Iterable[str]) -> str:
    """``text`` (a server's or libpq's message) with any password of ``dsns`` in it masked.

    For messages about one of many databases, where a reason is shown after
    the database's name: libpq does not repeat a password when it fails to
    connect, but a message is checked rather than trusted.
    """
    for dsn in dsns:
        for password in sorted(_sensitive_parts(dsn)[1], key=len, reverse=True):
            if len(password) >= 3:
                text = text.replace(password, "***")
    return text
