"""What a database's ``outbox`` schema holds, and whether a program can work on it.

The ``outbox`` command and the dispatcher read the same two facts (which
parts exist, which versions are recorded) and judge them here, so that both
say the same thing in the same words: the version found, the version
needed and ``outbox migrate``. A statement that fails because the schema was
never made is recognised here too (:func:`is_missing`), whichever driver ran
it, and told in the same words (:data:`MISSING`): ``publish()``, the
command, retention and the dispatcher cannot word it four ways.

The facts are read by one generator (:func:`reading`, as retention's plan
is): it yields the names of the queries to run and receives their rows, and
thin drivers run it, blocking (:func:`read_with`, ``outbox migrate`` and the
command's schema check) or awaited (:func:`aread_with`, the dispatcher's
schema gate).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from outbox.sql import QueryName

MISSING: Final = "the outbox schema is missing in this database: run `outbox migrate` first"
"""What every part says when the outbox schema is not there."""
MISSING_INBOX: Final = ("the outbox.inbox table is missing in this database: run "
                        "`outbox migrate` (`outbox migrate --inbox-only` for a database "
                        "that only receives)")
"""What the receiving side says when its one table is not there."""

# undefined_table, invalid_schema_name: the schema, or a table of it, was never made.
_MISSING_STATES: Final = frozenset({"42P01", "3F000"})


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg, psycopg2 or SQLAlchemy-wrapped error, if any."""
    for candidate in (exc, getattr(exc, "orig", None)):
        state = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


def is_missing(exc: BaseException) -> bool:
    """Whether ``exc`` is the database saying an outbox table or the schema does not exist.

    Read by SQLSTATE, not by class, so that any driver's error counts: the
    producer runs on psycopg, psycopg2 and SQLAlchemy connections.
    """
    return sqlstate(exc) in _MISSING_STATES


@dataclass(frozen=True, slots=True)
class SchemaState:
    """The parts present (the outbox's tables, the inbox) and the versions recorded."""

    versions_table: bool
    outbox: bool
    inbox: bool
    versions: frozenset[int]

    @property
    def version(self) -> int:
        """The highest version recorded; 0 without any."""
        return max(self.versions, default=0)


Rows = Sequence[Sequence[Any]]
Reading = Generator["QueryName", Rows, SchemaState]


def reading() -> Reading:
    """The reads of a schema's state: yields a query's name, gets its rows.

    From the catalogue and ``outbox.schema_version`` alone, so that a check
    of a database already current locks nothing but that table's ACCESS
    SHARE (see the queries' comments).
    """
    objects = (yield "schema_objects")[0]
    versions: list[int] = []
    if objects[0]:
        found = yield "schema_versions"
        versions = list(found[0][0]) if found else []
    return SchemaState(versions_table=bool(objects[0]), outbox=bool(objects[1]),
                       inbox=bool(objects[2]), versions=frozenset(versions))


def read_with(fetch: Callable[[QueryName], Rows]) -> SchemaState:
    """:func:`reading` run by ``fetch``, which runs the named query and returns its rows."""
    reads = reading()
    try:
        name = next(reads)
        while True:
            name = reads.send(fetch(name))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def aread_with(fetch: Callable[[QueryName], Awaitable[Rows]]) -> SchemaState:
    """:func:`read_with` for an awaited ``fetch``."""
    reads = reading()
    try:
        name = next(reads)
        while True:
            name = reads.send(await fetch(name))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def outbox_problem(state: SchemaState, needed: int) -> str | None:
    """Why a program needing schema version ``needed`` cannot work here; None when it can.

    A newer schema is fine: upgrades keep the previous version working
    (docs/upgrading.md, "Upgrading").
    """
    if not state.outbox:
        if state.inbox:
            return ("the outbox is missing: this database holds only the inbox "
                    f"(`outbox migrate --inbox-only`), version {needed} of the outbox is "
                    "needed: run `outbox migrate` to add it")
        return f"{MISSING} (no version found, version {needed} needed)"
    if state.version < needed:
        return (f"the outbox schema is at version {state.version}, older than version "
                f"{needed} that this outbox-dispatcher needs: run `outbox migrate`")
    return None
