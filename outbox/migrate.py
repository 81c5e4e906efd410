"""Create the outbox schema, or bring it up to date one numbered step at a time.

A database without the outbox gets ``schema.sql`` (the current shape). One
of an earlier version gets exactly the steps of ``sql/migrations/`` it
lacks, in order, each in its own transaction with its version row, so that
a step that fails leaves the steps before it applied and changes nothing
itself; the next run goes on from there.

Locks. The state is read first, read-only, from the catalogue and
``outbox.schema_version`` alone: a database already current is never locked
(only the advisory lock below is taken, and only when there is work). Each
step runs under a short ``lock_timeout``: a step waiting for a table lock
makes every later ``publish()`` queue behind it, so it gives up after a
fraction of a second, lets them through, and tries again a few times; a step
that still cannot get its locks raises :class:`MigrationBlocked`.

Names. Whatever the connection's ``search_path`` holds, every statement
resolves its names in ``pg_catalog`` (and names ``outbox.``'s): the path is
pinned to ``pg_catalog, pg_temp`` for the call and set back as it was when
done, so that an operator or function another role planted on the path is
never bound into a constraint, default or index of the schema. The script
of :func:`script` pins it the same way in every step, as schema.sql does.

Concurrent migrators (pods starting at once) take turns on a
transaction-scoped advisory lock and re-read the state under it, so each
step runs once. Any role may take that lock, so a migrator tries it rather
than waits for it: past ``turn_wait`` seconds it gives up with
:class:`MigrationBlocked`, naming the holder's pid.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from outbox._shared.schema import SchemaState, read_with
from outbox._shared.search_path import PINNED
from outbox._shared.text import first_line
from outbox.errors import OutboxError
from outbox.sql import SCHEMA_VERSION, QueryName, Step, queries, schema_text, steps

__all__ = ["SCHEMA_VERSION", "MigrationBlocked", "Plan", "known_versions", "migrate", "plan",
           "read_state", "script"]

LOCK_TIMEOUT = 0.5
"""Seconds a step waits for one lock before it gives up (and publish() goes on)."""
LOCK_ATTEMPTS = 5
"""Tries per step; the pauses between them grow, about 5 s of trying in all."""
TURN_WAIT = 60.0
"""Seconds a migrator waits for the migrators' lock (another's step) before it gives up."""


class MigrationBlocked(OutboxError):
    """A step could not get its locks: a long transaction holds the tables it changes."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What :func:`migrate` would do to a database in ``state``."""

    state: SchemaState
    create: bool                 # schema.sql makes the whole outbox
    steps: tuple[Step, ...]      # then (or instead) these, in order
    inbox_only: bool

    @property
    def pending(self) -> bool:
        return self.create or bool(self.steps)

    def describe(self) -> list[str]:
        """One line per thing to do, in order."""
        lines = [f"schema.sql: create the outbox schema at version {SCHEMA_VERSION}"
                 ] if self.create else []
        lines += [f"{step.name}: upgrade to version {step.version}" for step in self.steps]
        return lines


def read_state(conn: psycopg.Connection[Any]) -> SchemaState:
    """The database's schema state; reads the catalogue and outbox.schema_version only."""
    return read_with(lambda name: conn.execute(queries[name]).fetchall())


def plan(state: SchemaState, *, inbox_only: bool = False, check: bool = False,
         available: Sequence[Step] | None = None) -> Plan:
    """What brings ``state`` up to date (with ``inbox_only``: its inbox part alone).

    A database that holds the outbox is upgraded whole, its inbox included,
    even when ``inbox_only`` is asked for: skipping its other steps would
    leave a version recorded whose steps were not all applied. ``check``
    judges as ``outbox migrate --check`` does: a receiver's database, which
    holds the inbox and no outbox, is up to date when its inbox is, as if
    ``inbox_only`` were given.
    """
    available = steps() if available is None else tuple(available)
    inbox_only = inbox_only or (check and not state.outbox and state.inbox)
    if state.outbox:
        return Plan(state, False, tuple(s for s in available if s.version > state.version),
                    False)
    if inbox_only:
        return Plan(state, False, tuple(s for s in available
                                        if s.inbox and s.version not in state.versions), True)
    return Plan(state, True, (), False)


def migrate(conn: psycopg.Connection[Any], *, inbox_only: bool = False,
            lock_timeout: float = LOCK_TIMEOUT, attempts: int = LOCK_ATTEMPTS,
            turn_wait: float = TURN_WAIT, available: Sequence[Step] | None = None,
            on_step: Callable[[str], None] | None = None) -> tuple[int, int]:
    """Bring the database up to date; returns the versions (before, after).

    ``conn`` must not be in a transaction; every step commits on its own.
    ``on_step`` is told each thing done as it is done (the lines of
    :meth:`Plan.describe`). Raises :class:`MigrationBlocked` when a step
    cannot get its locks in ``attempts`` tries of ``lock_timeout`` seconds,
    or when another session holds the migrators' lock for ``turn_wait`` seconds.
    Whatever ``conn``'s ``search_path``, nothing is resolved through it; it is as it
    was when the call returns.
    """
    with _pinned_path(conn):
        return _migrate(conn, inbox_only, _Runner(conn, lock_timeout, attempts, turn_wait),
                        steps() if available is None else tuple(available), on_step)


@contextmanager
def _pinned_path(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The session on ``search_path`` pg_catalog, pg_temp meanwhile; its own path after.

    Session-level, not SET LOCAL in each transaction: schema.sql pins and
    restores the path itself (psql runs it outside a transaction block),
    keeping the path it finds, and would keep a local pin as the session's.
    """
    with conn.transaction():
        row = conn.execute(queries["session_search_path"]).fetchone()
        conn.execute(queries["set_search_path"], {"search_path": PINNED})
    try:
        yield
    finally:
        if row is not None and conn.info.transaction_status == TransactionStatus.IDLE:
            with conn.transaction():
                conn.execute(queries["set_search_path"], {"search_path": row[0]})


def _migrate(conn: psycopg.Connection[Any], inbox_only: bool, runner: _Runner,
             available: tuple[Step, ...],
             on_step: Callable[[str], None] | None) -> tuple[int, int]:
    with conn.transaction():
        todo = plan(read_state(conn), inbox_only=inbox_only, available=available)
    # The outbox's version; an inbox-only database has none until it gets the outbox.
    before = todo.state.version if todo.state.outbox or todo.inbox_only else 0
    if not todo.pending:
        return before, before
    if todo.create:
        if runner.run(None, inbox_only=False) and on_step:
            on_step(todo.describe()[0])
        # Another migrator may have been first; its steps are the same as ours.
        with conn.transaction():
            todo = plan(read_state(conn), available=available)
    for step in todo.steps:
        if runner.run(step, inbox_only=todo.inbox_only) and on_step:
            on_step(f"{step.name}: upgraded to version {step.version}")
    with conn.transaction():
        after = read_state(conn).version
    return before, after


def known_versions() -> range:
    """The schema versions ``migrate --sql --from`` accepts: 0 (no outbox) to the current."""
    return range(0, SCHEMA_VERSION + 1)


def script(from_version: int, *, lock_timeout: float = LOCK_TIMEOUT) -> str:
    """The SQL that brings a schema at ``from_version`` (0: none) to the current one, as
    :func:`migrate` applies it, for a migration tool (Alembic, Django, Flyway) or psql.

    Each step is its own transaction under ``lock_timeout``, with its row in
    ``outbox.schema_version``; a step that cannot run in a transaction block
    (``CREATE INDEX CONCURRENTLY``) is marked so, its statements one by one.
    Each step (schema.sql, for version 0) first pins the session's
    ``search_path`` to ``pg_catalog, pg_temp`` and at its end sets back the path
    it found (kept meanwhile in the setting ``outbox.saved_search_path``), so
    that nothing planted on the path of the session that runs it is bound into
    the schema, and the session is left as it was.
    Empty for a schema already current. Unlike ``outbox migrate`` it cannot
    retry a lock timeout or take turns with another migrator: run it once,
    from one place, and run it again after a lock timeout (every step is
    written to be safe to run again).
    """
    if from_version not in known_versions():
        raise ValueError(f"unknown schema version {from_version}: this release knows 0 to "
                         f"{SCHEMA_VERSION}")
    if from_version == SCHEMA_VERSION:
        return ""
    timeout = _lock_timeout_setting(lock_timeout)
    parts = ["-- outbox-dispatcher: the outbox schema from version "
             f"{from_version} to {SCHEMA_VERSION}, as `outbox migrate` applies it.\n"
             "-- Run it as the schema's owner; under psql: psql -v ON_ERROR_STOP=1 -f FILE.\n"
             "-- Each step resolves names in pg_catalog alone, whatever the session's\n"
             "-- search_path, and sets the session's own back at its end.\n"]
    if from_version == 0:
        parts.append(f"\n-- schema.sql: the outbox at version {SCHEMA_VERSION}\nBEGIN;\n"
                     f"SET LOCAL lock_timeout = '{timeout}';\n{schema_text().rstrip()}\n"
                     "COMMIT;\n")
        return "".join(parts)
    for step in steps():
        if step.version <= from_version:
            continue
        body = (f"{queries['script_pin_search_path']}\n{step.sql.rstrip()}\n"
                f"{_record(step.version)}\n{queries['script_unpin_search_path']}")
        if step.transactional:
            parts.append(f"\n-- {step.name}: version {step.version}\nBEGIN;\n"
                         f"SET LOCAL lock_timeout = '{timeout}';\n{body}\nCOMMIT;\n")
        else:
            parts.append(f"\n-- {step.name}: version {step.version}\n"
                         "-- outbox: NOT IN A TRANSACTION: the statements of this step cannot "
                         "run inside a transaction block (run each on its own)\n"
                         f"SET lock_timeout = '{timeout}';\n{body}\nRESET lock_timeout;\n")
    return "".join(parts)


def _lock_timeout_setting(seconds: float) -> str:
    """``lock_timeout`` as PostgreSQL takes it: whole milliseconds, at least 1."""
    return f"{max(1, round(seconds * 1000))}ms"


def _record(version: int) -> str:
    """The statement recording a step's version: ``record_version``, its parameter filled
    in (a script has no parameters)."""
    return queries["record_version"] % {"version": int(version)}


class _Runner:
    """Applies one step (None: schema.sql) with its version row, retrying lock timeouts."""

    def __init__(self, conn: psycopg.Connection[Any], lock_timeout: float,
                 attempts: int, turn_wait: float) -> None:
        self._conn = conn
        self._turn_wait = turn_wait
        self._timeout = _lock_timeout_setting(lock_timeout)
        self._pause = lock_timeout
        self._attempts = max(1, attempts)

    def run(self, step: Step | None, *, inbox_only: bool) -> bool:
        """Apply ``step`` unless another migrator did; True when this call applied it."""
        last: psycopg.errors.LockNotAvailable | None = None
        for attempt in range(1, self._attempts + 1):
            try:
                if step is None or step.transactional:
                    return self._in_transaction(step, inbox_only)
                return self._outside_transaction(step)
            except psycopg.errors.LockNotAvailable as exc:
                last = exc
                if attempt < self._attempts:
                    time.sleep(self._pause * attempt)
        what = "schema.sql" if step is None else step.name
        why = first_line(last) if last else "lock timeout"
        raise MigrationBlocked(
            f"{what}: could not get its locks in {self._attempts} tries of "
            f"{self._timeout} each (a long transaction holds a table it changes: {why}); "
            f"the steps before it are applied, this one changed nothing: "
            f"run `outbox migrate` again") from last

    def _done(self, step: Step | None) -> bool:
        state = read_state(self._conn)
        if step is None:
            return state.outbox
        if state.outbox:
            return state.version >= step.version
        return step.version in state.versions

    def _turn(self, query: QueryName) -> bool:
        """Try the migrators' lock once (``query``: its transaction or session form)."""
        row = self._conn.execute(queries[query]).fetchone()
        return bool(row and row[0])

    def _wait_turn(self, deadline: float, what: str) -> None:
        """Pause before the next try of the migrators' lock, or give up past ``deadline``."""
        if time.monotonic() < deadline:
            time.sleep(0.2)
            return
        with self._conn.transaction():
            row = self._conn.execute(queries["migrate_holders"]).fetchone()
        holder = f"pid {row[0]}" if row and row[0] else "another session"
        raise MigrationBlocked(
            f"{what}: {holder} held the outbox migrators' lock for {self._turn_wait:g} s "
            f"(another `outbox migrate`, or any role: pg_stat_activity shows what it does); "
            f"this step changed nothing: run `outbox migrate` again")

    def _in_transaction(self, step: Step | None, inbox_only: bool) -> bool:
        conn = self._conn
        deadline = time.monotonic() + self._turn_wait
        while True:
            with conn.transaction():
                if self._turn("migrate_lock"):
                    if self._done(step):
                        return False
                    conn.execute(queries["set_lock_timeout"],
                                 {"lock_timeout": self._timeout, "local": True})
                    if step is None:
                        conn.execute(schema_text().encode())  # records its version itself
                        return True
                    if inbox_only:
                        conn.execute(queries["version_table"])
                    conn.execute(step.sql.encode())
                    conn.execute(queries["record_version"], {"version": step.version})
                    return True
            self._wait_turn(deadline, "schema.sql" if step is None else step.name)

    def _outside_transaction(self, step: Step) -> bool:
        conn = self._conn
        conn.autocommit = True
        try:
            deadline = time.monotonic() + self._turn_wait
            while not self._turn("migrate_session_lock"):
                self._wait_turn(deadline, step.name)
            try:
                if self._done(step):
                    return False
                conn.execute(queries["set_lock_timeout"],
                             {"lock_timeout": self._timeout, "local": False})
                for statement in step.statements():
                    conn.execute(statement.encode())
                conn.execute(queries["record_version"], {"version": step.version})
                return True
            finally:
                conn.execute("RESET lock_timeout")
                conn.execute(queries["migrate_session_unlock"])
        finally:
            conn.autocommit = False

