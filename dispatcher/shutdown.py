"""A graceful stop: what happens to claimed work after the claimer has stopped.

Requests already sent get ``--shutdown-grace`` to finish and are recorded as
usual. Claims not sent yet (waiting for a slot or for their rate-limit turn)
are handed back without charging an attempt: nothing of them reached the
endpoint. Requests still running when the grace ends are cancelled and
recorded as failed attempts due again at once: they may have reached it.
Every request slot goes back to the fleet as its request ends. All of it is
written by the completer, which the caller then closes.
"""

from __future__ import annotations

from dispatcher.completer import Completer
from dispatcher.flights import Flights
from dispatcher.policy.model import Record


async def drain(flights: Flights, completer: Completer, grace: float) -> None:
    """After the claimer stopped: finish, hand back, record; never raises."""
    drained = await flights.drain(grace)
    for d in drained.cut_off:
        completer.add(Record(d.id, d.lease_token, "pending", delay=0.0,
                             error="dispatcher stopped during the attempt", reason="other"))
    completer.hand_back(drained.unsent)
