"""A graceful stop: what happens to claimed work after the claimer has stopped.

Requests already sent get ``--shutdown-grace`` to finish and are recorded as
usual. Claims not sent yet (waiting for a slot or for the rate limit) are
handed back without charging an attempt: nothing of them reached the
endpoint. Requests still running when the grace ends are cancelled and
recorded as failed attempts due again at once: they may have reached it.
"""

from __future__ import annotations

import logging

from dispatcher.completer import Completer
from dispatcher.db import Database, DatabaseDown
from dispatcher.flights import Flights
from dispatcher.leases import Leases
from dispatcher.policy.model import Record

log = logging.getLogger("dispatcher")


async def drain(flights: Flights, completer: Completer, leases: Leases, db: Database,
                grace: float) -> None:
    """After the claimer stopped: finish, hand back, record; never raises."""
    drained = await flights.drain(grace)
    for d in drained.cut_off:
        completer.add(Record(d.id, d.lease_token, "pending", delay=0.0,
                             error="dispatcher stopped during the attempt"))
    unsent = drained.unsent
    if unsent:
        try:
            await db.fetch("release", {
                "ids": [d.id for d in unsent], "tokens": [d.lease_token for d in unsent]})
        except DatabaseDown:
            log.warning("could not hand back %d claims; their leases will expire", len(unsent))
        leases.drop(d.id for d in unsent)
