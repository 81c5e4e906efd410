"""Cursors that read as on a plain psycopg connection, whatever the caller's connection is.

``outbox.endpoints`` runs on the application's own connection, and an
application's connection is set up for the application: Django's loads
``jsonb`` (and ``inet``, ``cidr``) as text and stamps every ``timestamptz``
with its ``TIME_ZONE`` (none at all under ``USE_TZ = False``), and makes its
cursors client-side binding ones (``cursor_factory``); another framework may
load ``json`` as text or use ``$1`` placeholders (``RawCursor``). The
functions must answer the same on any of them. So each call makes its cursor
itself (``psycopg.Cursor``, never the connection's factory) and gives it
psycopg's own loaders back for every type our statements read, before the
first statement runs. Only the cursor changes: the connection, and the
application's own cursors, keep what the application registered.

Row factories are the call's too: the caller's ``row_factory`` is never used.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import Format
from psycopg.rows import AsyncRowFactory, Row, RowFactory

_TYPES = ("json", "jsonb", "timestamptz", "timestamp", "date", "time", "timetz", "interval",
          "uuid", "inet", "cidr", "text", "varchar", "bpchar", "name", "bool", "int2", "int4",
          "int8", "oid", "float4", "float8", "numeric", "bytea")
"""Every type a statement of ours returns (and their arrays): what a caller's connection
may have been given another loader for."""


def _loaders() -> tuple[tuple[int, type[Any]], ...]:
    """(oid, loader) of psycopg's defaults for those types and their arrays, both formats."""
    found = []
    for name in _TYPES:
        info = psycopg.adapters.types[name]
        for oid in (info.oid, info.array_oid):
            for fmt in (Format.TEXT, Format.BINARY):
                loader = psycopg.adapters.get_loader(oid, fmt)
                if loader is not None:
                    found.append((oid, loader))
    return tuple(found)


_DEFAULT_LOADERS = _loaders()


def _plain(adapters: Any) -> None:
    # register_loader files the class under its own format (TEXT or BINARY).
    for oid, loader in _DEFAULT_LOADERS:
        adapters.register_loader(oid, loader)


def cursor(conn: psycopg.Connection[Any], row_factory: RowFactory[Row]) -> psycopg.Cursor[Row]:
    """A cursor of ``conn`` with psycopg's own loaders and ``row_factory``."""
    cur = psycopg.Cursor(conn, row_factory=row_factory)
    _plain(cur.adapters)
    return cur


def acursor(conn: psycopg.AsyncConnection[Any],
            row_factory: AsyncRowFactory[Row]) -> psycopg.AsyncCursor[Row]:
    """The async twin of :func:`cursor`."""
    cur = psycopg.AsyncCursor(conn, row_factory=row_factory)
    _plain(cur.adapters)
    return cur
