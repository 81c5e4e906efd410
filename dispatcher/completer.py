"""Record attempt outcomes in batches: one guarded UPDATE for many deliveries.

A request finishing does not write to the database itself: it hands a
``Record`` (``policy.model``) to the completer, which writes whatever has
accumulated in one statement (the ``complete`` query) while the previous write runs. Under load
this turns hundreds of commits per second into a few; when idle a record is
written at once. While the database is down records wait here and are
retried; their leases keep being extended meanwhile, since the dispatcher
still holds them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable

from dispatcher.db import Database, retry_until
from dispatcher.leases import Leases
from dispatcher.policy.model import Record

log = logging.getLogger("dispatcher.completer")
_MAX_BATCH = 1000


class Completer:
    """Writes records in batches; drops the leases of what was written, then calls ``wake``.

    ``written`` counts the records written so far (``--once`` watches it).
    """

    def __init__(self, db: Database, leases: Leases, wake: Callable[[], None],
                 give_up: asyncio.Event) -> None:
        self._db = db
        self._leases = leases
        self._wake = wake
        self._give_up = give_up
        self.written = 0
        self._queue: list[Record] = []
        self._ready = asyncio.Event()
        self._closing = False
        self._writing = 0

    def add(self, record: Record) -> None:
        self._queue.append(record)
        self._ready.set()

    def pending(self) -> int:
        """Records not yet written, including the batch being written now."""
        return len(self._queue) + self._writing

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._closing = True
        self._ready.set()

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
                self._writing = len(batch)
                try:
                    written = await retry_until(functools.partial(self._write, batch),
                                                self._give_up)
                finally:
                    self._writing = 0
                if written is None:
                    log.warning("could not record %d results before giving up; their leases "
                                "will expire and they will be delivered again", len(batch))
                    return
                self._done(batch, written)
            if self._closing:
                return

    def _done(self, batch: list[Record], written: set[int]) -> None:
        self.written += len(batch)
        self._leases.drop(record.delivery_id for record in batch)
        if len(written) < len(batch):
            log.info("%d results discarded: their leases had been taken over",
                     len(batch) - len(written))
        self._wake()

    async def _write(self, batch: list[Record]) -> set[int]:
        results = json.dumps([[r.delivery_id, str(r.lease_token), r.state, r.delay, r.error,
                               r.status] for r in batch])
        rows = await self._db.fetch("complete", {"results": results})
        return {int(row[0]) for row in rows}
