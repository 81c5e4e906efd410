"""The databases a file names, with those its ``[catalog]`` query lists; read again on refresh.

:func:`databases` gives the whole list once (the ``outbox`` command);
:func:`first` gives it at a long-running reader's start, and :func:`refresh`
gives it again, or the last good list and why not (a
long-running reader such as the dispatcher, which must keep serving what it
had when the file or the catalog cannot be read).

The query is the operator's own text, and the catalog's tables are the
application's, usually in ``public``: it runs with the ``search_path``
``pg_catalog, public, pg_temp``, so that ``FROM tenant_databases`` finds
``public.tenant_databases`` while every built-in function and operator is
still found in ``pg_catalog`` first (a look-alike planted in ``public`` wins
only where the query itself mixes types that have no exact built-in match;
naming the table ``public.tenant_databases`` and revoking CREATE on
``public`` in the catalog database leaves it nothing).

Whoever owns the catalog's tables must not run code as the reader: it may
read what they may not. So the read runs with ``row_security`` off (a
policy would otherwise run with the reader's rights, and leak what it reads
through the rows it lets by: the server now refuses the query instead), and
a query that reads a view or a foreign table (whose code runs as the
reader too), or a table with row security or policies, is refused before it
runs: preparing it locks every relation it reads, views' included, and the
locks are read back (``catalog_relations``). The rows are data, admitted one
at a time (:mod:`outbox._shared.catalog_rows`).

The catalog query is checked before it runs: it is prepared and described
(the server parses and plans it, nothing is executed), so that a query that
does not parse, or that does not return ``name`` and ``dsn``, is a bad file
(:class:`BadDatabasesFile`) and not taken for an outage; a catalog database
that cannot be reached is :class:`CatalogUnreachable`, tried again later. It
runs in a read-only transaction under a statement timeout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg import pq

from outbox._shared.catalog_rows import Aside, Listing, admit, said
from outbox._shared.databases import (
    BadDatabasesFile,
    Catalog,
    Database,
    DatabasesFile,
    load,
    merge,
)
from outbox._shared.dsn import KEEPALIVES, server_options, without_passwords
from outbox._shared.text import first_line
from outbox.sql import queries

CONNECT_TIMEOUT = 10
"""Seconds to reach the catalog database before it counts as unreachable."""
_COLUMNS = ("name", "dsn", "listen_dsn")
# undefined_table, undefined_function, undefined_object: a name the pinned path cannot see.
_NOT_FOUND = frozenset({"42P01", "42883", "42704"})
_UNQUALIFIED = (" (the query runs with search_path pg_catalog, public, pg_temp: name a "
                "table in another schema with its schema, as app.tenant_databases)")
_ROW_SECURITY = ("the catalog is read with row security off, so that no policy of the "
                 "table's owner runs with the reader's rights: list the databases in a table "
                 "without row security")
_KINDS = {"v": "a view", "f": "a foreign table"}
_TABLES_ONLY = ("the catalog is read from tables only, since the code of a view or a foreign "
                "table runs with the reader's rights: name the table itself")
CATALOG_OPTION: LiteralString = ("-c search_path=pg_catalog,public,pg_temp "
                                 "-c row_security=off")
"""The catalog connection's settings: built-ins first, then the application's ``public``;
no policy runs (see the module's docstring)."""


class CatalogUnreachable(Exception):
    """The catalog database did not answer; the message says why (no DSN in it)."""


@dataclass(frozen=True, slots=True)
class Refreshed:
    """A refresh's outcome: the list in force, and why it is the old one when it is; the
    catalog rows set aside (as of the list in force)."""

    databases: tuple[Database, ...]
    refresh: float
    problem: str | None = None
    aside: tuple[Aside, ...] = ()


def databases(config: DatabasesFile, environ: Mapping[str, str] | None = None) -> Listing:
    """The file's databases, then the catalog's rows that may be served (each bad row set
    aside alone); names unique across both, at least one."""
    if config.catalog is None:
        return Listing(merge(config.databases, ()))
    env = os.environ if environ is None else environ
    listing = admit(read_catalog(config.catalog), taken=[d.name for d in config.databases],
                    hosts=config.catalog.hosts, environ=env)
    if not config.databases and not listing.databases and listing.aside:
        raise BadDatabasesFile("it lists no database to serve: the file names none and every "
                               f"catalog row is set aside ({said(listing.aside)})")
    return Listing(merge(config.databases, listing.databases), listing.aside)


def first(path: str | Path, environ: Mapping[str, str] | None = None) -> Refreshed:
    """The list at start: a bad file (or catalog) raises BadDatabasesFile (exit 2);
    a catalog database that is down gives the file's own entries, and why, to be tried
    again at the next :func:`refresh`."""
    config = load(path, environ)
    try:
        listing = databases(config, environ)
    except CatalogUnreachable as exc:
        return Refreshed(merge(config.databases, (), allow_empty=True), config.refresh,
                         f"{exc}; it is tried again in {config.refresh:g} s")
    return Refreshed(listing.databases, config.refresh, aside=listing.aside)


def refresh(path: str | Path, last: Refreshed, environ: Mapping[str, str] | None = None
            ) -> Refreshed:
    """The file and catalog read again; on any failure ``last``'s list, with the reason."""
    try:
        config = load(path, environ)
        listing = databases(config, environ)
    except (BadDatabasesFile, CatalogUnreachable) as exc:
        return Refreshed(last.databases, last.refresh,
                         f"{exc}; the last good list of {len(last.databases)} databases "
                         "stays in force", last.aside)
    return Refreshed(listing.databases, config.refresh, aside=listing.aside)


def read_catalog(catalog: Catalog) -> list[dict[str, Any]]:
    """The rows of the catalog query, by column, as the server gave them (unchecked)."""
    try:
        conn = psycopg.connect(catalog.dsn, connect_timeout=CONNECT_TIMEOUT,
                               application_name="outbox-catalog", autocommit=True,
                               options=server_options(catalog.dsn, CATALOG_OPTION), **KEEPALIVES)
    except psycopg.OperationalError as exc:
        raise CatalogUnreachable("the catalog database is unreachable: "
                                 + without_passwords(first_line(exc), [catalog.dsn])) from None
    try:
        with conn, conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            conn.execute(queries["catalog_settings"])
            columns = _describe(conn, catalog)
            _refuse_code(conn)
            rows = conn.execute(catalog.query.encode(), prepare=False).fetchall()
    except psycopg.OperationalError as exc:
        raise CatalogUnreachable("the catalog database failed: "
                                 + without_passwords(first_line(exc), [catalog.dsn])) from None
    except psycopg.Error as exc:
        raise BadDatabasesFile("catalog: the query failed: "
                               + without_passwords(first_line(exc), [catalog.dsn])
                               + _hint(exc.sqlstate, first_line(exc))) from None
    return [dict(zip(columns, row, strict=True)) for row in rows]


def _describe(conn: psycopg.Connection[Any], catalog: Catalog) -> Sequence[str]:
    """The query's column names, read by preparing it (parsed, never run)."""
    pgconn = conn.pgconn
    result = pgconn.prepare(b"", catalog.query.encode())
    if result.status != pq.ExecStatus.COMMAND_OK:
        state = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
        message = _error(result)
        if state in _NOT_FOUND:
            raise BadDatabasesFile("catalog: the query does not parse: " + message
                                   + _UNQUALIFIED)
        doing = "is refused" if state == "42501" else "does not parse"
        raise BadDatabasesFile(f"catalog: the query {doing}: " + message
                               + _hint(state, message))
    described = pgconn.describe_prepared(b"")
    if described.status != pq.ExecStatus.COMMAND_OK:
        raise BadDatabasesFile("catalog: the query cannot be described: " + _error(described))
    names = [(described.fname(i) or b"").decode() for i in range(described.nfields)]
    if "name" not in names or "dsn" not in names or len(set(names)) != len(names) \
            or not set(names) <= set(_COLUMNS):
        raise BadDatabasesFile("catalog: the query must return the columns name and dsn "
                               f"(and optionally listen_dsn), not {', '.join(names) or 'none'}")
    return names


def _refuse_code(conn: psycopg.Connection[Any]) -> None:
    """Refuse the prepared query when a relation it reads would run its owner's code: a
    view or a foreign table, or a table with row security or policies."""
    found = conn.execute(queries["catalog_relations"]).fetchone()
    if found is None:
        return
    schema, name, kind = found
    what = _KINDS.get(kind, "a table with row security or policies")
    why = _TABLES_ONLY if kind in _KINDS else _ROW_SECURITY
    raise BadDatabasesFile(f"catalog: the query reads {schema}.{name}, {what}: {why}")


def _hint(state: str | None, message: str) -> str:
    """Why the server refused the query, when row security is the reason."""
    if state == "42501" and "row-level security" in message:
        return f" ({_ROW_SECURITY})"
    return ""


def _error(result: pq.abc.PGresult) -> str:
    message = (result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode(
        errors="replace")
    return message.splitlines()[0] if message.strip() else "no reason given"
