"""The databases of ``outbox web --databases FILE``: each one's parts, opened on first use.

A file may list hundreds of databases; the view must not hold a pool for
each. So a database's pools (and its counts' cache) are made when a page of
it is first asked for, small (:data:`CONNECTIONS` readers), with idle
connections closed after :data:`IDLE_SECONDS`; and at most :data:`MOST_OPEN`
databases are kept open at once: past that, the one used longest ago (and
not in the last :data:`GRACE_SECONDS`, so a page still reading keeps its
pool) is closed, to be opened again when asked for.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from outbox._shared.catalog_rows import Aside
from outbox._shared.databases import BadDatabasesFile, Database, choose

if TYPE_CHECKING:
    from outbox.web.state import Parts

CONNECTIONS = 2
"""Reading connections per database at most."""
IDLE_SECONDS = 60.0
"""A connection unused this long is closed."""
MOST_OPEN = 8
"""Databases whose pools are kept open at once."""
GRACE_SECONDS = 60.0
"""A database used this recently is never closed to make room."""


class UnknownDatabase(LookupError):
    """``?db=`` names no database of the file (404), or is missing where one is needed (400)."""

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


class Sites:
    """Each database's :class:`Parts`, made by ``build`` on first use, closed when idle."""

    def __init__(self, databases: tuple[Database, ...], build: Callable[[Database], Parts],
                 *, most_open: int = MOST_OPEN, aside: tuple[Aside, ...] = ()) -> None:
        self.databases = databases
        self.aside = aside  # catalog rows not served: listed on /databases, never opened
        self._build = build
        self._most = most_open
        self._open: OrderedDict[str, tuple[Parts, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str | None) -> Parts:
        """The parts of the database ``name``; an unknown or missing name is UnknownDatabase."""
        try:
            database = choose(self.databases, name)
        except BadDatabasesFile as exc:
            raise UnknownDatabase(f"{exc.args[0].replace('--db NAME', '?db=NAME')}",
                                  missing=name is None) from None
        now = time.monotonic()
        closing: list[Parts] = []
        with self._lock:
            found = self._open.pop(database.name, None)
            part = found[0] if found is not None else self._build(database)
            self._open[database.name] = (part, now)
            while len(self._open) > self._most:
                oldest, (old, used) = next(iter(self._open.items()))
                if now - used < GRACE_SECONDS:
                    break
                del self._open[oldest]
                closing.append(old)
        for old in closing:
            close(old)
        return part

    def close(self) -> None:
        with self._lock:
            parts = [p for p, _ in self._open.values()]
            self._open.clear()
        for part in parts:
            close(part)


def close(part: Parts) -> None:
    part.readers.close()
    if part.writer is not None:
        part.writer.close()
