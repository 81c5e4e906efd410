"""``outbox web --databases FILE``: the file (and its catalog) read again at its ``refresh``.

As the dispatcher reads it: every ``refresh`` (every few seconds while the
last read failed), in a thread of its own, so that no page waits for the
catalog. A database added is listed (and opened when a page asks for it),
one removed leaves ``/databases`` and its pools are closed (:meth:`Sites.replace
<outbox.web.sites.Sites.replace>`). A file or catalog that cannot be read
leaves the last good list in force; the log says why once per change, and
never a DSN.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from outbox._shared import database_catalog
from outbox._shared.database_catalog import Refreshed
from outbox.web.sites import Sites

log = logging.getLogger("outbox.web")
RETRY = 5.0
"""Seconds between two reads while the last one failed."""


class Reread:
    """Reads the list again until stopped, and hands each new one to the sites."""

    def __init__(self, path: str, first: Refreshed, sites: Sites,
                 environ: Mapping[str, str] | None = None) -> None:
        self._path = path
        self._last = first
        self._sites = sites
        self._environ = environ
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outbox-web databases",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)

    def once(self) -> None:
        """Read the list again now and put it in force (the last good one on failure)."""
        fresh = database_catalog.refresh(self._path, self._last, self._environ)
        if fresh.problem != self._last.problem:
            if fresh.problem is not None:
                log.warning("the databases list was not read again: %s", fresh.problem)
            else:
                log.info("the databases list is read again (%d databases)",
                         len(fresh.databases))
        self._last = fresh
        self._sites.replace(fresh.databases, fresh.aside)

    def _run(self) -> None:
        while not self._stop.wait(RETRY if self._last.problem else self._last.refresh):
            try:
                self.once()
            except Exception:  # a view that cannot read its list keeps the last one
                log.exception("the databases list was not read again")
