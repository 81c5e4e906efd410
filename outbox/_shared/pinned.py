"""The pinned ``search_path`` for a call that runs on the caller's own connection.

``outbox.endpoints`` and ``outbox.admin`` run in the application's
transaction, on a connection whose path is the application's: under
``ALTER DATABASE ... SET search_path = "$user", public, pg_catalog`` a
look-alike operator planted in ``public`` would run with the caller's rights
(an operator's, who may read every signing secret). Each call therefore
pins the path to ``pg_catalog, pg_temp`` for its own statements, first, and
gives the caller's transaction its path back at the end (:mod:`search_path`).

The pin is transaction-local. In the caller's transaction (or the one its
first statement begins, on a connection that is not in autocommit) the
caller's path is set back when the call ends, refused or not; a call that
fails in the database leaves the transaction to be rolled back, which undoes
the pin. On an idle autocommit connection the call is one transaction of its
own, whose end undoes it. The pin's statements read their rows as tuples
whatever row factory, cursor factory or loaders the caller's connection has
(:mod:`plain`), and are never prepared: the caller's connection may go
through a transaction pooler, where a statement prepared in one transaction
is missing in the next.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from outbox._shared.plain import acursor, cursor
from outbox._shared.search_path import PIN, RESTORE

_IDLE = psycopg.pq.TransactionStatus.IDLE
_INTRANS = psycopg.pq.TransactionStatus.INTRANS


@contextmanager
def pinned(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Run the block with the path pinned, then give the caller's transaction its own."""
    if conn.autocommit and conn.info.transaction_status == _IDLE:
        with conn.transaction(), cursor(conn, tuple_row) as cur:
            cur.execute(PIN, prepare=False)
            yield
        return
    with cursor(conn, tuple_row) as cur:
        row = cur.execute(PIN, prepare=False).fetchone()
    try:
        yield
    finally:
        if row is not None and conn.info.transaction_status == _INTRANS:
            with cursor(conn, tuple_row) as cur:
                cur.execute(RESTORE, (str(row[0]),), prepare=False)


@asynccontextmanager
async def apinned(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """The async twin of :func:`pinned`."""
    if conn.autocommit and conn.info.transaction_status == _IDLE:
        async with conn.transaction(), acursor(conn, tuple_row) as cur:
            await cur.execute(PIN, prepare=False)
            yield
        return
    async with acursor(conn, tuple_row) as cur:
        await cur.execute(PIN, prepare=False)
        row = await cur.fetchone()
    try:
        yield
    finally:
        if row is not None and conn.info.transaction_status == _INTRANS:
            async with acursor(conn, tuple_row) as cur:
                await cur.execute(RESTORE, (str(row[0]),), prepare=False)
