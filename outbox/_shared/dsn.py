"""Finding the database: ``--dsn``, then ``OUTBOX_DSN``, ``DATABASE_URL``, libpq's ``PG*``.

A malformed connection string is refused before any connection is tried, so
that both commands can call it bad usage (exit 2) rather than an outage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import psycopg

from outbox._shared.text import first_line


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


def check_dsn(dsn: str) -> None:
    """Raise InvalidDsn for a connection string libpq cannot parse (bad usage, not an outage)."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidDsn(f"invalid database URL or DSN: {first_line(exc)}") from None
