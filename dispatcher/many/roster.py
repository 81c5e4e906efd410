"""Which databases this member owns: the list (the file and its catalog) and the fleet's members.

The list is read again every ``refresh`` (every few seconds while the last
read failed); a list that cannot be read leaves the last good one in force,
and the log says why, once per change, as it says which catalog rows are set
aside (by name, with their reasons: nothing else of a row is logged). The
members are read from the home database every third of ``--lease``
(``membership``); when they cannot be read, the last view stays (at start:
this member alone, so it serves every database). The databases owned are
those the rendezvous hash gives this member among the live ones
(``ownership``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from dispatcher.many import ownership
from dispatcher.many.budget import Budget
from dispatcher.many.membership import Membership, fleet_of
from outbox._shared import database_catalog
from outbox._shared.database_catalog import Refreshed
from outbox._shared.databases import Database as Listed
from outbox._shared.databases import load

log = logging.getLogger("dispatcher.many")
CATALOG_RETRY = 5.0
"""Seconds between two reads of the list while the last read failed."""


class Roster:
    """The list in force, the members as last read, and what this member owns of them."""

    def __init__(self, path: str, first: Refreshed, environ: Mapping[str, str], *,
                 lease: float, budget: Budget, stopping: asyncio.Event) -> None:
        self._path = path
        self._environ = environ
        self._list = first
        self._list_problem = first.problem
        self._aside: dict[str, str] = {}
        self._lease = lease
        self._budget = budget
        self._stopping = stopping
        self._members: set[str] | None = None
        self._membership: Membership | None = None
        self._membership_said = False

    def say_problem(self) -> None:
        """At start: why the catalog's databases are not listed yet, if they are not, and
        the catalog rows set aside."""
        if self._list_problem:
            log.warning("%s", self._list_problem)
        self._say_aside(self._list)

    def _say_aside(self, fresh: Refreshed) -> None:
        """Each catalog row set aside, once, and again when its reason changes."""
        now = {a.label: a.reason for a in fresh.aside}
        for aside in fresh.aside:
            if self._aside.get(aside.label) != aside.reason:
                log.warning("%s", aside.said())
        self._aside = now

    def count(self) -> int:
        return len(self._list.databases)

    def listed(self, name: str) -> bool:
        return any(d.name == name for d in self._list.databases)

    def names(self) -> list[str]:
        """Every database of the list in force, whoever serves it."""
        return [d.name for d in self._list.databases]

    def owned(self) -> dict[str, Listed]:
        """The listed databases this member serves, by name."""
        listed = {d.name: d for d in self._list.databases}
        if self._membership is None or self._members is None:
            return listed
        mine = ownership.owned(listed, self._members, self._membership.me)
        return {name: d for name, d in listed.items() if name in mine}

    def _home(self) -> tuple[str, str] | None:
        """The home database's direct DSN and the fleet's key: the catalog's, else the
        first listed database's."""
        try:
            catalog = load(self._path, self._environ).catalog
        except ValueError:
            catalog = None
        if catalog is not None:
            return catalog.dsn, "catalog " + catalog.query
        if not self._list.databases:
            return None
        home = self._list.databases[0]
        return home.listen_dsn or home.dsn, "database " + home.name

    async def keep_list(self) -> None:
        while not self._stopping.is_set():
            wait = CATALOG_RETRY if self._list.problem else self._list.refresh
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)
            if self._stopping.is_set():
                return
            async with self._budget.one():  # the catalog's connection, if it has one
                fresh = await asyncio.to_thread(database_catalog.refresh, self._path,
                                                self._list, self._environ)
            if fresh.problem != self._list_problem:
                if fresh.problem is not None:
                    log.warning("the databases list was not read again: %s", fresh.problem)
                else:
                    log.info("the databases list is read again (%d databases)",
                             len(fresh.databases))
                self._list_problem = fresh.problem
            self._say_aside(fresh)
            self._list = fresh

    async def keep_members(self) -> None:
        while not self._stopping.is_set():
            await self.beat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._lease / 3)

    async def beat(self) -> None:
        """Beat in the home database and read the members; keep the last view on failure."""
        home = self._home()
        if home is None:
            return
        dsn, key = home
        if self._membership is None or self._membership.home_dsn != dsn:
            me = None if self._membership is None else self._membership.me
            if self._membership is not None:
                await self._membership.close()
            self._membership = Membership(dsn, fleet=fleet_of(key), lease=self._lease, me=me)
        members = await self._membership.beat()
        if members is None:
            if not self._membership_said:
                log.warning("the fleet's members cannot be read in the home database (%s); "
                            "keeping the last view (%s)", self._membership.problem,
                            "this dispatcher serves every database" if self._members is None
                            else f"{len(self._members)} members")
                self._membership_said = True
            return
        if self._membership_said:
            log.info("the fleet's members are read again")
            self._membership_said = False
        if members != self._members:
            log.info("the fleet has %d member%s", len(members), "" if len(members) == 1 else "s")
        self._members = members

    async def close(self) -> None:
        """Leave the fleet (the membership session ends)."""
        if self._membership is not None:
            await self._membership.close()
