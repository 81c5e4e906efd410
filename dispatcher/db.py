"""Database access for the dispatcher: autocommit connections that heal themselves.

Each job of the dispatcher (claiming, recording results, maintenance) owns one
:class:`Database`: a single autocommit connection, so every statement is its
own short transaction and no connection ever sits idle in a transaction while
HTTP requests run. When the server goes away a call raises
:class:`DatabaseDown` (:class:`DatabaseRefused` when it refuses us for good,
a wrong password say); the caller decides whether to skip a beat or retry
(:func:`retry_until`), and the next call reconnects. :class:`Health` remembers
whether the database answered last, for ``/readyz``.

Behind a transaction pooler (PgBouncer's ``pool_mode = transaction``) a
connection keeps no session: each transaction may run on another
server connection. :func:`connect` notices one (the pooler refuses the
startup packet's ``options``, or ignores them) and then opens connections
without options and without prepared statements (PgBouncer before 1.21
cannot carry them across transactions), and :class:`Database` gives every
statement its settings with ``SET LOCAL`` in a transaction of its own: the
only settings that stay with the statement behind such a pooler.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential, wait_random

from outbox._shared.dsn import server_options
from outbox._shared.schema import MISSING, is_missing
from outbox._shared.search_path import SET_LOCAL
from outbox._shared.text import first_line
from outbox.sql import QueryName, queries

log = logging.getLogger("dispatcher.db")
T = TypeVar("T")

# Dead peers are noticed within ~25 s even when no statement is running
# (keepalives), and within 30 s when a statement sent is never acknowledged
# (tcp_user_timeout: without it Linux retransmits for about 15 minutes).
_CONNECT_OPTIONS: dict[str, Any] = {
    "autocommit": True,
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
}
ANSWER_TIMEOUT = 90.0
"""Seconds a statement may go unanswered before its connection counts as dead.

The server cancels any statement after 60 s (statement_timeout), so a longer
silence means the connection carries nothing: a half-open link whose packets
are acknowledged by something in between (a proxy, a NAT, a pooler whose own
server connection died), which neither keepalives nor tcp_user_timeout see."""
# Added to the DSN's own options. jit=off: the claim's row estimates are guesses
# (its LIMITs come from other CTEs), so with a million pending rows its cost
# passes jit_above_cost and PostgreSQL spent about 900 ms compiling a statement
# that runs in 4 ms (BENCHMARKS.md, "The queue table at scale"). READ COMMITTED
# whatever the database's default: the claim skips rows others lock and the
# guarded writes re-check their row, where SERIALIZABLE or REPEATABLE READ
# (ALTER DATABASE ... SET default_transaction_isolation) would fail concurrent
# dispatchers' statements with 40001 instead.
SERVER_OPTIONS = ("-c statement_timeout=60000 -c jit=off "
                  "-c default_transaction_isolation=read\\ committed")
# The same settings for one transaction, for connections through a pooler (see above).
# The search_path first: nothing after it may meet a planted function (search_path.py).
_LOCAL_STATEMENTS = (b"BEGIN ISOLATION LEVEL READ COMMITTED", SET_LOCAL.encode(),
                     b"SET LOCAL statement_timeout = 60000", b"SET LOCAL jit = off")
# What SERVER_OPTIONS makes statement_timeout: options that reached the server. Every
# name qualified: when they did not, the path is still the database's own.
_APPLIED = (b"SELECT pg_catalog.current_setting('statement_timeout') OPERATOR(pg_catalog.=) "
            b"'1min'")
# PgBouncer's words for a startup parameter it neither knows nor ignores.
_POOLER_REFUSAL = "unsupported startup parameter"
_pooled: set[str] = set()  # DSNs found to go through a transaction pooler, this process
APPLICATION_NAME = "outbox-dispatcher"
"""Every connection's application_name starts with this; a space and the connection's
role follow (claim, complete, maintenance, listener, retention, metrics), so that an
operator (or a test) can tell them apart in pg_stat_activity."""


class DatabaseDown(Exception):
    """The database could not be reached or dropped the connection."""


class DatabaseRefused(DatabaseDown):
    """The server answered but refuses us: bad credentials, no such database or role.

    Waiting does not fix these (someone must), so ``--once`` gives up on them
    at once; a long-running dispatcher keeps retrying, as for an outage, in
    case a secret is being rotated.
    """


# libpq gives no SQLSTATE for a failed connection, only the server's message:
# what retrying cannot fix, as PostgreSQL words it (lc_messages in English).
_REFUSALS = ("authentication failed", "does not exist", "no pg_hba.conf entry",
             "permission denied for database", "is not permitted to log in",
             "no password supplied", "password is required")


def refused(exc: BaseException) -> bool:
    """Whether a connection failure is one retrying cannot fix."""
    text = str(exc)
    return any(phrase in text for phrase in _REFUSALS)


class Health:
    """Whether the database answered the last statement anyone sent."""

    def __init__(self, name: str | None = None, *, quiet: bool = False) -> None:
        """``name``: the database's, in its log lines when there are several; ``quiet``:
        log nothing (a short look whose caller says what it found)."""
        self._name = f"database {name}" if name else "database"
        self._quiet = quiet
        self.db_ok = False
        self.why: str | None = None  # why the database is not usable, as last said
        self.schema_ok = False  # set by the schema gate once the schema is one we can use
        self._said: str | None = None  # the last state logged, so each change logs once

    @property
    def ready(self) -> bool:
        """/readyz: the database answers and its schema is one this dispatcher can use."""
        return self.db_ok and self.schema_ok

    def up(self) -> None:
        if self._said != "up" and not self._quiet:
            log.info("%s is reachable", self._name)
            self._said = "up"
        self.db_ok = True

    def down(self, why: str) -> None:
        if self._said != why and not self._quiet:
            log.warning("%s is not usable, retrying: %s", self._name, why)
            self._said = why
        self.why = why
        self.db_ok = False


def pooled(dsn: str) -> bool:
    """Whether connections to ``dsn`` were found to go through a transaction pooler."""
    return dsn in _pooled


async def connect(dsn: str, role: str) -> psycopg.AsyncConnection[Any]:
    """A new autocommit connection, named ``outbox-dispatcher ROLE`` on the server.

    Direct, the settings travel in the startup packet. Through a pooler
    (see the module's docstring) they cannot: the connection has none and
    never prepares statements; :class:`Database` sets them per transaction.
    """
    name = f"{APPLICATION_NAME} {role}"
    if dsn not in _pooled:
        try:
            conn = await psycopg.AsyncConnection.connect(
                dsn, options=server_options(dsn, SERVER_OPTIONS), application_name=name,
                **_CONNECT_OPTIONS)
        except psycopg.OperationalError as exc:
            if _POOLER_REFUSAL not in str(exc):
                raise
        else:
            try:
                row = await (await conn.execute(_APPLIED)).fetchone()
            except BaseException:  # cut off or given up on: never leave the socket behind
                await conn.close()
                raise
            if row is not None and row[0]:
                return conn
            await conn.close()  # options ignored (ignore_startup_parameters): a pooler
        _pooled.add(dsn)
        log.info("the database connection goes through a transaction pooler: settings "
                 "per transaction, no prepared statements")
    conn = await psycopg.AsyncConnection.connect(dsn, application_name=name,
                                                 **_CONNECT_OPTIONS)
    conn.prepare_threshold = None
    return conn


class Database:
    """One autocommit connection, reopened on demand after a failure.

    One statement at a time: tasks that share a Database (the maintainer's
    lease beside ``--once``'s count, say) wait their turn. Behind a pooler a
    statement is a pipeline of BEGIN, SET LOCAL, the statement and COMMIT, and
    psycopg lets a second task's statements join a pipeline under way, where
    they ran after its COMMIT, outside any pinned transaction: with the
    database's own search_path (``search_path.py``). Waiting for the turn does
    not count against the answer timeout.
    """

    def __init__(self, dsn: str, health: Health, role: str, *,
                 answer_timeout: float = ANSWER_TIMEOUT) -> None:
        self._dsn = dsn
        self._health = health
        self._role = role
        self._answer_timeout = answer_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._turn = asyncio.Lock()

    async def fetch(self, name: QueryName, params: dict[str, Any] | None = None,
                    ) -> Sequence[tuple[Any, ...]]:
        """Run the named query; its rows (empty for statements without RETURNING)."""
        async with self._turn:
            return await self._fetch(name, params)

    async def _fetch(self, name: QueryName, params: dict[str, Any] | None,
                     ) -> Sequence[tuple[Any, ...]]:
        try:
            async with asyncio.timeout(self._answer_timeout):
                rows = await self._run(name, params)
        except TimeoutError as exc:
            await self.close()
            why = f"no answer from the database within {self._answer_timeout:g}s"
            self._health.down(why)
            raise DatabaseDown(why) from exc
        except psycopg.ProgrammingError as exc:
            if not is_missing(exc):
                raise
            # Not migrated yet (a migration job may still be on its way): wait
            # as for an outage, not ready, rather than exit.
            self._health.down(MISSING)
            raise DatabaseDown(MISSING) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            await self.close()
            why = first_line(exc)
            self._health.down(why)
            if refused(exc):
                raise DatabaseRefused(why) from exc
            raise DatabaseDown(why) from exc
        self._health.up()
        return rows

    async def _run(self, name: QueryName, params: dict[str, Any] | None,
                   ) -> Sequence[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed:
            self._conn = await connect(self._dsn, self._role)
        query, names = positional(name)
        args = None if params is None else [_value(params[key]) for key in names]
        async with psycopg.AsyncRawCursor(self._conn) as cur:
            if pooled(self._dsn):
                return await _in_own_transaction(cur, query, args)
            await cur.execute(query, args)
            return await cur.fetchall() if cur.description else []

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # closing a broken connection
                await conn.close()


_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s")


@functools.cache
def positional(name: QueryName) -> tuple[bytes, tuple[str, ...]]:
    """The named query with ``$1``, ``$2``, ... for its ``%(name)s`` placeholders, and the
    parameters' names in that order.

    Converted once per process, where psycopg converts a query longer than
    4 KiB (the claim is 14) anew on every execution, a regular expression
    over its whole text: with it, a walk for due work took 0.22 ms of the
    dispatcher's CPU, without 0.15 (BENCHMARKS.md, "Slow receivers").
    """
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        key = match.group(1)
        if key is None:
            return "%"
        if key not in names:
            names.append(key)
        return f"${names.index(key) + 1}"
    return _PLACEHOLDER.sub(number, queries[name]).encode(), tuple(names)


def _value(value: Any) -> Any:
    """A list of integers or of aware datetimes as the text of a PostgreSQL array (the
    statements cast it): psycopg dumps a list element by element in Python, which cost
    a walk for due work half its CPU with 64 floors. Anything else as it is."""
    if not isinstance(value, list):
        return value
    if all(type(item) is int for item in value):
        return "{" + ",".join(map(str, value)) + "}"
    if all(type(item) is datetime and item.tzinfo is not None for item in value):
        return "{" + ",".join([f'"{item.isoformat()}"' for item in value]) + "}"
    return value


async def _in_own_transaction(cur: psycopg.AsyncRawCursor[Any], query: bytes,
                              args: list[Any] | None) -> list[tuple[Any, ...]]:
    """The statement in a transaction of its own, after its settings (SET LOCAL).

    Pipelined: BEGIN, the settings, the statement and COMMIT go out together
    and end in one Sync, so that the pooler sees one transaction and the
    statement costs one round trip, as without a pooler.
    """
    conn = cur.connection
    try:
        async with conn.pipeline():
            for setting in _LOCAL_STATEMENTS:
                await conn.execute(setting)
            await cur.execute(query, args)
            await conn.execute(b"COMMIT")
    except BaseException:
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                await conn.execute(b"ROLLBACK")
        raise
    return await cur.fetchall() if cur.description else []


async def retry_until(operation: Callable[[], Awaitable[T]], give_up: asyncio.Event,
                      max_wait: float = 5.0) -> T | None:
    """Retry ``operation`` while the database is down, with capped, jittered backoff.

    Returns None when ``give_up`` is set before it succeeded. The waits double from 0.1 s
    up to 80 % of ``max_wait``, plus up to 20 % at random, so that a fleet coming back
    does not reconnect in step (wait_exponential_jitter spells its start differently
    across the tenacity versions we accept).
    """
    retrying = AsyncRetrying(retry=retry_if_exception_type(DatabaseDown),
                             wait=(wait_exponential(multiplier=0.1, max=0.8 * max_wait)
                                   + wait_random(0, 0.2 * max_wait)),
                             sleep=lambda s: _sleep_unless(give_up, s), reraise=True)
    try:
        async for attempt in retrying:
            with attempt:
                if give_up.is_set():
                    return None
                return await operation()
    except DatabaseDown:
        return None
    return None  # pragma: no cover - AsyncRetrying always yields


async def _sleep_unless(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
