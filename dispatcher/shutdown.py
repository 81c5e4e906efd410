"""A graceful stop: what happens to claimed work after the claimer has stopped.

Requests already sent get ``--shutdown-grace`` to finish and are recorded as
usual. Claims not sent yet (waiting for a slot or for the rate limit) are
handed back without charging an attempt: nothing of them reached the
endpoint. Requests still running when the grace ends are cancelled and
recorded as failed attempts due again at once: they may have reached it.
"""

from __future__ import annotations

import asyncio
import logging

from dispatcher.completer import Record
from dispatcher.db import DatabaseDown
from dispatcher.engine import Engine

log = logging.getLogger("dispatcher")


async def drain(engine: Engine) -> None:
    """After the claimer stopped: finish, hand back, record; never raises."""
    unstarted = [t for t in engine.requests if t not in engine.started]
    handback = [d for t in unstarted for d in engine.requests[t]]
    handback += [d for queue in engine.waiting.values() for _, group in queue for d in group]
    engine.waiting.clear()
    for task in unstarted:
        task.cancel()
    running = [t for t in engine.requests if t in engine.started]
    if running:
        log.info("waiting up to %.0fs for %d requests in flight",
                 engine.config.shutdown_grace, len(running))
        _, late = await asyncio.wait(running, timeout=engine.config.shutdown_grace)
        for task in late:
            for d in engine.requests[task]:
                engine.completer.add(Record(d.id, d.lease_token, "pending", delay=0.0,
                                         error="dispatcher stopped during the attempt"))
            task.cancel()
    await asyncio.gather(*unstarted, return_exceptions=True)
    if handback:
        try:
            await engine.claim_db.fetch("release", {
                "ids": [d.id for d in handback], "tokens": [d.lease_token for d in handback]})
        except DatabaseDown:
            log.warning("could not hand back %d claims; their leases will expire",
                        len(handback))
        for d in handback:
            engine.held.pop(d.id, None)
