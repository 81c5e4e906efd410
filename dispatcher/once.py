"""``--once``: one pass over what is due, for a cron or CI job, then a summary and an exit code.

Everything the pass does differently lives here: before claiming it rescues
the expired leases of dispatchers gone (no maintainer may come round before
it ends); the claimer asks :meth:`OncePass.over` after each claim; at the end
it counts what is left and says what the pass did. The schema gate gives up
at once instead of waiting (``SchemaGate.wait(once=True)``), and no listener
or health server runs: ``app`` asks :attr:`Parts.once` for each.
"""

from __future__ import annotations

import logging

import psycopg

from dispatcher.completer import Completer
from dispatcher.db import Database, DatabaseDown
from dispatcher.deliver import Deliverer
from dispatcher.flights import Flights
from dispatcher.maintenance import Maintenance
from outbox._shared.text import first_line

log = logging.getLogger("dispatcher")


class OncePass:
    """One ``--once`` pass: when it is over, and what it did."""

    def __init__(self, *, flights: Flights, completer: Completer, deliverer: Deliverer,
                 maintenance: Maintenance, db: Database) -> None:
        self._flights = flights
        self._completer = completer
        self._deliverer = deliverer
        self._maintenance = maintenance
        self._db = db
        self._seen = completer.written

    def over(self, more: bool, throttled: bool) -> bool:
        """Asked after each claim (``claimer.PassOver``): True when a claim found nothing
        more, and nothing it could unblock is outstanding: no request running or waiting,
        no result unwritten or written since the claim before (a result frees a key's next
        event or a slot), no rate-limit turn to wait for."""
        completer = self._completer
        written, self._seen = self._seen, completer.written
        return (not more and not throttled and self._flights.idle()
                and not completer.pending() and written == completer.written)

    async def before(self) -> None:
        """Expired leases of dispatchers gone are this pass's work too; a database that went
        away meanwhile is the claimer's to wait out."""
        try:
            await self._maintenance.rescue()
        except DatabaseDown:
            pass
        except psycopg.Error as exc:
            log.warning("could not rescue expired leases before this pass: %s",
                        first_line(exc))

    async def summary(self) -> str:
        """The pass's last line: what it did, and what it left pending for later."""
        d = self._deliverer
        try:
            rows = await self._db.fetch("pending_count", {})
            waiting = str(rows[0][0])
        except Exception:  # the database went away meanwhile: the counts of this pass stand
            waiting = "unknown"
        return (f"stopped after one pass: {d.delivered} delivered, {d.retried} retried, "
                f"{d.dead_lettered} dead-lettered, {waiting} left waiting")

    def exit_code(self) -> int:
        """1 when the pass dead-lettered something (a job's failure to see), else 0."""
        return 1 if self._deliverer.dead_lettered else 0
