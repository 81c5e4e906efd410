"""The databases of ``outbox web --databases FILE``: each one's parts, opened on first use.

A file may list hundreds of databases; the view must not hold a pool for
each. So a database's pools (and its counts' cache) are made when a page of
it is first asked for, small (:data:`CONNECTIONS` readers), with idle
connections closed after :data:`IDLE_SECONDS`; and at most :data:`MOST_OPEN`
databases are open at once, however recently each was read: past that, the
one used longest ago among those nothing reads right now (no request holds
it, no connection of its pools is lent, its counts are not being computed)
is closed, to be opened again when asked for. When every open one is being
read, the request is answered 503, the view busy: a client walking ``?db=``
over every name makes the server hold the view's connections to at most
:data:`MOST_OPEN` databases, never one per name.

A request holds its database from :meth:`Sites.hold` until
:meth:`Sites.release` (``state.Hold`` does both around each request), so
that its pools are never closed under it. The list itself is read again at
the file's ``refresh`` (``reread``): :meth:`Sites.replace` closes at once
the pools of a database that left it (or whose entry changed) and nothing
holds, and those of one still held when its last request is done.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outbox._shared.catalog_rows import Aside
from outbox._shared.databases import BadDatabasesFile, Database, choose
from outbox.web.db import NoConnection

if TYPE_CHECKING:
    from outbox.web.state import Parts

CONNECTIONS = 2
"""Reading connections per database at most."""
IDLE_SECONDS = 60.0
"""A connection unused this long is closed."""
MOST_OPEN = 8
"""Databases whose pools are open at once: at most 16 reading connections (and 8 writing
ones with ``--allow-actions``) for the whole view, whatever the file lists."""


class UnknownDatabase(LookupError):
    """``?db=`` names no database of the file (404), or is missing where one is needed (400)."""

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(slots=True)
class _Open:
    parts: Parts
    database: Database
    held: int = 0
    """Requests holding it now."""


class Sites:
    """Each database's :class:`Parts`, made by ``build`` on first use, closed to make room."""

    def __init__(self, databases: tuple[Database, ...], build: Callable[[Database], Parts],
                 *, most_open: int = MOST_OPEN, aside: tuple[Aside, ...] = ()) -> None:
        self.databases = databases
        self.aside = aside  # catalog rows not served: listed on /databases, never opened
        self._build = build
        self._most = most_open
        self._open: OrderedDict[str, _Open] = OrderedDict()  # the least recently used first
        self._retired: list[_Open] = []  # left the list while held: closed once let go
        self._lock = threading.Lock()

    def hold(self, name: str | None) -> Parts:
        """The parts of the database ``name``, held until :meth:`release`; an unknown or
        missing name is UnknownDatabase, a view whose open databases are all being read is
        NoConnection (503)."""
        try:
            database = choose(self.databases, name)
        except BadDatabasesFile as exc:
            raise UnknownDatabase(f"{exc.args[0].replace('--db NAME', '?db=NAME')}",
                                  missing=name is None) from None
        closing: Parts | None = None
        with self._lock:
            found = self._open.pop(database.name, None)
            if found is None:
                if len(self._open) >= self._most:
                    spare = next((n for n, o in self._open.items()
                                  if o.held == 0 and not busy(o.parts)), None)
                    if spare is None:
                        raise NoConnection(f"the view is busy: the {self._most} databases it "
                                           "keeps open at once are all being read")
                    closing = self._open.pop(spare).parts
                found = _Open(self._build(database), database)
            found.held += 1
            self._open[database.name] = found
        if closing is not None:
            close(closing)
        return found.parts

    def release(self, part: Parts) -> None:
        """A request that held these parts (from :meth:`hold`) is done with them."""
        with self._lock:
            for found in self._open.values():
                if found.parts is part:
                    found.held -= 1
                    return
            retired = next((o for o in self._retired if o.parts is part), None)
            if retired is None:
                return
            retired.held -= 1
            if retired.held > 0:
                return
            self._retired.remove(retired)
        close(part)

    def replace(self, databases: tuple[Database, ...], aside: tuple[Aside, ...]) -> None:
        """The list read again: a database no longer in it, or whose entry changed, is
        closed (once no request holds it); one added is opened when first asked for."""
        listed = {d.name: d for d in databases}
        closing: list[Parts] = []
        with self._lock:
            self.databases, self.aside = databases, aside
            for name, found in list(self._open.items()):
                if listed.get(name) == found.database:
                    continue
                del self._open[name]
                if found.held:
                    self._retired.append(found)
                else:
                    closing.append(found.parts)
        for part in closing:
            close(part)

    def close(self) -> None:
        with self._lock:
            parts = [o.parts for o in (*self._open.values(), *self._retired)]
            self._open.clear()
            self._retired.clear()
        for part in parts:
            close(part)


def busy(part: Parts) -> bool:
    """Something reads the database now without a request holding it: a connection is lent
    or asked for, or its counts are computed behind a page."""
    return (part.readers.busy() or (part.writer is not None and part.writer.busy())
            or part.counts.running)


def close(part: Parts) -> None:
    part.readers.close()
    if part.writer is not None:
        part.writer.close()
