"""A short look at a database served by no pinned connection: can it be served, is work due?

One short-lived connection: the role's privileges and the schema's version
(as the schema gate checks them), then ``database_due`` (fleet.sql): when
the next delivery comes due, and whether a lease ran out; then, with a
``watcher``, the gauges' measurement and the row that says who serves it
(``watch``). The connection is closed before the look returns; the caller
holds one of the budget's connections meanwhile. Reasons never carry a DSN
or a password.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from dispatcher.db import Database, DatabaseDown, DatabaseRefused, Health
from dispatcher.many.watch import Measured, Watcher, measure
from dispatcher.schema_gate import SchemaGate
from outbox._shared.dsn import without_passwords
from outbox._shared.text import first_line
from outbox.sql import SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class Look:
    """What a look found: why the database cannot be served (None: it can), and if it
    can, whether work is due now and in how many seconds the next comes due (None:
    nothing waits), and what its gauges report (with a watcher)."""

    problem: str | None = None
    due_now: bool = False
    due_in: float | None = None
    refused: bool = False
    measured: Measured | None = None


async def look(dsn: str, *, check: bool = True, watcher: Watcher | None = None) -> Look:
    """Look at the database once; never raises for the database's sake. ``check``: also
    the role's privileges and the schema's version (a catalogue query: the caller skips
    it for a database that passed it a short while ago); ``watcher``: also measure its
    gauges and vouch that this process serves it."""
    health = Health(quiet=True)
    db = Database(dsn, health, "probe")
    try:
        problem = await SchemaGate(db, health, needed=SCHEMA_VERSION).problem() \
            if check else None
        if problem is not None:
            return Look(problem=_masked(problem, dsn))
        rows = await db.fetch("database_due")
        measured = None if watcher is None else await measure(db, watcher)
    except DatabaseRefused as exc:
        return Look(problem=_masked(str(exc), dsn), refused=True)
    except DatabaseDown as exc:
        return Look(problem=_masked(str(exc) or "unreachable", dsn))
    except psycopg.Error as exc:
        return Look(problem=_masked(first_line(exc), dsn), refused=True)
    finally:
        await db.close()
    next_due, expired, now = rows[0]
    if expired:
        next_due = now
    if next_due is None:
        return Look(measured=measured)
    due_in = (next_due - now).total_seconds()
    return Look(due_now=due_in <= 0, due_in=max(due_in, 0.0), measured=measured)


def _masked(text: str, dsn: str) -> str:
    return without_passwords(text, [dsn])
