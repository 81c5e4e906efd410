"""Every database of a databases file at a glance: ``outbox status --all`` and the web view's
``/databases``.

Each database is read through its own short connection, a few at a time
(:data:`WORKERS` threads), each bounded by a connect timeout and a statement
timeout, so that hundreds of databases, some of them down, are read in
seconds and one that hangs holds up nothing but its own row. A database
that cannot be read is a row saying why (:data:`STATES`), never a failure of
the whole listing; the reason shown is masked of any password. A catalog row
set aside is a ``refused`` row too (the fleet refuses to serve it), named as
the dispatcher's log names it and never connected to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

from outbox import admin
from outbox._shared.catalog_rows import Aside
from outbox._shared.databases import Database
from outbox._shared.dsn import KEEPALIVES, server_options, without_passwords
from outbox._shared.schema import outbox_problem
from outbox._shared.text import first_line
from outbox.sql import SCHEMA_VERSION

STATES = ("ok", "unreachable", "no-schema", "old-schema", "refused")
WORKERS = 8
"""Databases read at once: enough for hundreds in seconds, few enough for any server."""
CONNECT_TIMEOUT = 5
"""Seconds to reach one database before its row says it is unreachable."""
# Each statement's bound; the startup packet carries it with the pinned search_path.
_SETTINGS = "-c jit=off -c statement_timeout=10000"
# Words of libpq's or the server's refusal of the role (a connection failure has no SQLSTATE).
_REFUSALS = re.compile(r"authentication failed|permission denied|role \S+ does not exist"
                       r"|no pg_hba\.conf entry|not permitted to log in")


@dataclass(frozen=True, slots=True)
class DatabaseState:
    """One database's row: its state and, when it is ``ok``, its backlog."""

    database: str
    state: str
    pending: int | None = None
    dead: int | None = None
    oldest_pending_seconds: float | None = None
    reason: str | None = None

    def shape(self) -> dict[str, Any]:
        """The row as ``status --all --json`` gives it."""
        return {"database": self.database, "state": self.state, "pending": self.pending,
                "dead": self.dead, "oldest_pending_seconds": self.oldest_pending_seconds,
                "reason": self.reason}


def read_all(databases: Sequence[Database], aside: Sequence[Aside] = (),
             workers: int = WORKERS) -> list[DatabaseState]:
    """Every database's row, the oldest backlog first (then those that could not be read,
    the catalog rows set aside among them)."""
    rows = [DatabaseState(a.label, "refused", reason="the catalog row is set aside, not "
                          f"served: {a.reason}") for a in aside]
    if databases:
        with ThreadPoolExecutor(max_workers=min(workers, len(databases)),
                                thread_name_prefix="outbox-overview") as pool:
            rows += pool.map(read_one, databases)
    return sorted(rows, key=_order)


def shape(rows: Sequence[DatabaseState]) -> dict[str, Any]:
    return {"databases": [row.shape() for row in rows]}


def read_one(database: Database) -> DatabaseState:
    """One database's row; whatever goes wrong becomes its state and reason."""
    name = database.name

    def hidden(exc: BaseException) -> str:
        return without_passwords(first_line(exc), [database.dsn])

    try:
        conn = psycopg.connect(database.dsn, connect_timeout=CONNECT_TIMEOUT,
                               application_name="outbox-cli",
                               options=server_options(database.dsn, _SETTINGS), **KEEPALIVES)
    except psycopg.Error as exc:
        reason = hidden(exc)
        refused = _REFUSALS.search(reason) is not None
        return DatabaseState(name, "refused" if refused else "unreachable", reason=reason)
    try:
        with conn:
            return _read(conn, name)
    except psycopg.errors.InsufficientPrivilege as exc:
        return DatabaseState(name, "refused", reason=hidden(exc))
    except psycopg.OperationalError as exc:
        return DatabaseState(name, "unreachable", reason=hidden(exc))
    except psycopg.Error as exc:
        return DatabaseState(name, "refused", reason=hidden(exc))


def _read(conn: psycopg.Connection[Any], name: str) -> DatabaseState:
    from outbox.migrate import read_state

    with conn.transaction():
        state = read_state(conn)
    if not state.outbox:
        return DatabaseState(name, "no-schema", reason=outbox_problem(state, SCHEMA_VERSION))
    if state.version < SCHEMA_VERSION:
        return DatabaseState(name, "old-schema", reason=outbox_problem(state, SCHEMA_VERSION))
    if state.version > SCHEMA_VERSION:
        return DatabaseState(name, "refused", reason=(
            f"the outbox schema is at version {state.version}, newer than version "
            f"{SCHEMA_VERSION} that this outbox-dispatcher knows: upgrade the package"))
    status = admin.status(conn)
    pending = sum(e.pending for e in status.endpoints)
    oldest = max((e.oldest_pending_seconds for e in status.endpoints if e.pending), default=0.0)
    return DatabaseState(name, "ok", pending=pending, dead=sum(e.dead for e in status.endpoints),
                         oldest_pending_seconds=oldest)


def _order(row: DatabaseState) -> tuple[int, float, int, str]:
    """Readable databases by their oldest pending age, largest first; then the others."""
    if row.state == "ok":
        return (0, -(row.oldest_pending_seconds or 0.0), -(row.pending or 0), row.database)
    return (1, 0.0, STATES.index(row.state), row.database)
