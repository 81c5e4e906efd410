"""The hint: which databases had rows inserted, read with one query per database server.

``pg_stat_database`` counts the rows inserted in every database of a server
(``databases_activity`` in fleet.sql); a database whose count rose since the
last read had a publish (or other writes) and deserves a look now, instead
of at its next sweep. One connection per server, held, counted in the
budget, and only while one database could still pin its connections beside it;
when the budget has no such room, that server goes without the hint (the sweep still
comes round). The server's statistics lag its commits by up to
a second or so (PostgreSQL flushes them at most once a second per session).
A server's counts outlive its session (closed while none of its databases is
cold): the first read of a new session compares with them, so that a publish
between the two sessions is a move, not part of a new baseline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg.conninfo import conninfo_to_dict

from dispatcher.db import Database, DatabaseDown, Health
from dispatcher.many.budget import KEEP, SITE_COST, Budget
from outbox._shared.databases import Database as Listed

log = logging.getLogger("dispatcher.many")


def server_of(dsn: str) -> tuple[str, str, str]:
    """(host, port, dbname) as libpq would read them from the DSN alone."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return ("", "", "")
    return (str(parts.get("host") or parts.get("hostaddr") or ""), str(parts.get("port") or ""),
            str(parts.get("dbname") or ""))


@dataclass(slots=True)
class _Server:
    db: Database
    names: dict[str, str] = field(default_factory=dict)  # datname -> our name
    counts: dict[str, int] = field(default_factory=dict)  # datname -> tup_inserted


class Activity:
    """Reads each server's counts and says which databases moved since the last read."""

    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self._servers: dict[tuple[str, str], _Server] = {}
        self._counts: dict[tuple[str, str], dict[str, int]] = {}  # kept across sessions

    async def moved(self, databases: Iterable[Listed]) -> set[str]:
        """The names (among ``databases``) whose inserted rows rose since the last read."""
        wanted: dict[tuple[str, str], dict[str, str]] = {}
        dsn_of: dict[tuple[str, str], str] = {}
        for database in databases:
            host, port, dbname = server_of(database.dsn)
            if dbname:
                wanted.setdefault((host, port), {})[dbname] = database.name
                dsn_of.setdefault((host, port), database.dsn)
        for key in [k for k in self._servers if k not in wanted]:
            await self._drop(key)
        moved: set[str] = set()
        for key, names in wanted.items():
            server = self._servers.get(key)
            if server is None:
                if not self._budget.take(1, keep=KEEP + SITE_COST):  # a database can still pin
                    continue
                server = self._servers[key] = _Server(
                    Database(dsn_of[key], Health(quiet=True), "activity"),
                    counts=self._counts.setdefault(key, {}))
            server.names = names
            try:
                rows = await server.db.fetch("databases_activity")
            except (DatabaseDown, psycopg.Error):
                await self._drop(key)
                continue
            for datname, inserted in rows:
                name = names.get(datname)
                before = server.counts.get(datname)
                server.counts[datname] = int(inserted)
                if name is not None and before is not None and int(inserted) > before:
                    moved.add(name)
        return moved

    async def _drop(self, key: tuple[str, str]) -> None:
        server = self._servers.pop(key)
        await server.db.close()
        await self._budget.give(1)

    async def close(self) -> None:
        for key in list(self._servers):
            await self._drop(key)
