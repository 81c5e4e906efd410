"""What every ``outbox`` subcommand shares: finding the database, errors, output.

Exit codes everywhere: 0 success, 1 failure at run time, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import psycopg

from outbox._present import args as arguments
from outbox._shared import database_catalog as catalog
from outbox._shared.catalog_rows import Listing
from outbox._shared.databases import BadDatabasesFile, choose
from outbox._shared.databases import load as load_databases
from outbox._shared.dsn import (
    KEEPALIVES,
    InvalidDsn,
    check_dsn,
    nothing_configured,
    resolve_dsn,
    server_options,
)
from outbox._shared.schema import MISSING, is_missing, outbox_problem
from outbox._shared.search_path import APPLIED, arrived
from outbox._shared.text import first_line, printable
from outbox.sql import SCHEMA_VERSION

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """The user asked for something impossible: exit 2, nothing changed."""


class CommandFailed(Exception):
    """The command could not do its work at run time: exit 1."""


def check_window(args: argparse.Namespace) -> None:
    """``--since`` not before ``--until``: exit 2 (see ``outbox._present.args.check_window``)."""
    try:
        arguments.check_window(getattr(args, "since", None), getattr(args, "until", None))
    except arguments.EmptyWindow as exc:
        raise UsageError("argument " + exc.said("--")) from None


def add_dsn_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dsn", default=argparse.SUPPRESS,
                        help="database URL (default: $OUTBOX_DSN, $DATABASE_URL, "
                        "libpq PG* variables)")
    parser.add_argument("--databases", default=argparse.SUPPRESS, metavar="FILE",
                        help="a databases file naming many databases, instead of --dsn "
                        "(default: $OUTBOX_DATABASES when no --dsn is given)")
    parser.add_argument("--db", default=argparse.SUPPRESS, metavar="NAME",
                        help="with --databases: the database to work on (default: $OUTBOX_DB; "
                        "needed when the file lists more than one)")


def databases_file(args: argparse.Namespace) -> str | None:
    """The databases file asked for: --databases, else $OUTBOX_DATABASES unless --dsn is given.

    ``--dsn`` with ``--databases`` is bad usage, as is ``--db`` without a file.
    """
    flag_dsn, flag_file = getattr(args, "dsn", None), getattr(args, "databases", None)
    if flag_dsn and flag_file:
        raise UsageError("--dsn and --databases cannot be given together: one names a "
                         "database, the other a file of them")
    path = flag_file or (None if flag_dsn else os.environ.get("OUTBOX_DATABASES") or None)
    if path is None and getattr(args, "db", None):
        raise UsageError("--db picks one database of a databases file: give --databases FILE "
                         "(or set OUTBOX_DATABASES)")
    return path


def file_for_all(args: argparse.Namespace, does: str) -> str:
    """The databases file an ``--all`` command works through (``does``: what ``--all`` does,
    for the message); without one, or with ``--db``, a UsageError."""
    if getattr(args, "db", None):
        raise UsageError(f"--all {does}: --db is not for it")
    path = databases_file(args)
    if path is None:
        raise UsageError("--all needs a databases file: give --databases FILE (or set "
                         "OUTBOX_DATABASES)")
    return path


def all_databases(path: str) -> Listing:
    """Every database the file and its catalog list, and the catalog rows set aside: a bad
    file is exit 2, a catalog down 1."""
    try:
        return catalog.databases(load_databases(path))
    except BadDatabasesFile as exc:
        raise UsageError(str(exc)) from None
    except catalog.CatalogUnreachable as exc:
        raise CommandFailed(str(exc)) from None


def refresh_of(path: str) -> float:
    """The file's ``refresh``: how often a long-running reader reads it again."""
    try:
        return load_databases(path).refresh
    except BadDatabasesFile as exc:
        raise UsageError(str(exc)) from None


def target_dsn(args: argparse.Namespace) -> str:
    """The DSN of the one database this command works on (see :func:`databases_file`)."""
    path = databases_file(args)
    if path is None:
        return resolve_dsn(getattr(args, "dsn", None))
    listed = all_databases(path)
    wanted = getattr(args, "db", None) or os.environ.get("OUTBOX_DB") or None
    try:
        return choose(listed.databases, wanted).dsn
    except BadDatabasesFile as exc:
        aside = next((a for a in listed.aside if wanted is not None and a.name == wanted), None)
        raise UsageError(aside.said() if aside is not None else str(exc)) from None


def say_aside(listing: Listing) -> None:
    """One line on standard error for each catalog row set aside (a command over every
    database goes on with the others)."""
    for aside in listing.aside:
        print(f"outbox: {aside.said()}", file=sys.stderr)


@contextmanager
def connect(args: argparse.Namespace, *, needs: Literal["outbox", "outbox or inbox"] | None
            = "outbox") -> Iterator[psycopg.Connection[Any]]:
    """A connection for one command; a database that cannot be reached is exit 1.

    ``needs="outbox"``: the outbox schema must be there at this package's
    version or newer, else exit 1 with what was found and ``outbox migrate``
    (nothing is locked for the check: it reads the catalogue and
    ``outbox.schema_version``). ``"outbox or inbox"``: a receiver's database
    holding only the inbox will do too (``outbox purge``). ``None``: no check
    (``outbox migrate``).
    """
    dsn = target_dsn(args)
    try:
        check_dsn(dsn)
    except InvalidDsn as exc:
        raise UsageError(str(exc)) from None
    try:
        # jit=off: compiling a status count on a large table costs more than the count.
        conn = psycopg.connect(dsn, connect_timeout=10, application_name="outbox-cli",
                               options=server_options(dsn, "-c jit=off"), **KEEPALIVES)
    except psycopg.OperationalError as exc:
        hint = nothing_configured(dsn)
        raise CommandFailed(f"cannot connect to the database: {first_line(exc)}"
                            + (f"; {hint}" if hint else "")) from exc
    try:
        with conn:
            _check_settings(conn)
            if needs is not None:
                _check_schema(conn, inbox_will_do=needs == "outbox or inbox")
            yield conn
    except psycopg.Error as exc:
        if is_missing(exc):
            raise CommandFailed(MISSING) from exc
        raise


def _check_settings(conn: psycopg.Connection[Any]) -> None:
    """The pinned search_path reached the server, else exit 1 before any other statement.

    A pooler that drops startup parameters (PgBouncer's ``ignore_startup_parameters =
    options``) would leave the database's own path, where code planted in ``public`` could
    run with the operator's rights."""
    with conn.transaction(), conn.cursor() as cur:
        row = cur.execute(APPLIED).fetchone()
    path = str(row[0]) if row else ""
    if not arrived(path):
        raise CommandFailed(
            f"the server did not apply this connection's settings (its search_path is "
            f"{path!r}, not 'pg_catalog, pg_temp'): a connection pooler in between drops "
            "startup parameters (PgBouncer's ignore_startup_parameters = options); run the "
            "outbox command against PostgreSQL directly")


def _check_schema(conn: psycopg.Connection[Any], *, inbox_will_do: bool) -> None:
    from outbox.migrate import read_state

    with conn.transaction():
        state = read_state(conn)
    if inbox_will_do and state.inbox and not state.outbox:
        return
    problem = outbox_problem(state, SCHEMA_VERSION)
    if problem is not None:
        raise CommandFailed(problem)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_line(text: str) -> None:
    """One line of human output; what it holds from the database cannot drive the terminal.

    Every line a command prints for people that may hold a stored value (a
    type, a name, an error) goes through here or :func:`print_table`: see
    ``printable``. JSON output needs none of it, ``json.dumps`` escapes
    control characters (bidi controls stay, as data).
    """
    print(printable(text))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table; an empty one says so instead of printing bare headers.

    Cells are made printable (see :func:`print_line`) before they are measured."""
    if not rows:
        print("(none)")
        return
    cells = [[printable("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
