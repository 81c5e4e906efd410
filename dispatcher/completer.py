"""Record what requests did, in batches: one guarded statement for many results.

A request finishing does not write to the database itself. It hands the
completer a ``Record`` (``policy.model``) per delivery, the slot it held when
no waiting request takes it over, and what its answer says of the endpoint
for the circuit breaker; the completer writes whatever has accumulated in one
statement (the ``complete`` query) while the previous write runs. Under load
this turns hundreds of commits per second into a few; when idle a result is
written at once. While the database is down results wait here and are
retried; their leases keep being extended meanwhile, since the dispatcher
still holds them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.db import Database, retry_until
from dispatcher.leases import Leases
from dispatcher.limits import circuit
from dispatcher.limits.circuit import CircuitVerdict
from dispatcher.limits.slots import SlotBook, slots_json
from dispatcher.policy.model import Completed, Delivery, Record, Slot
from outbox._shared.endpoint_defaults import DEFAULT_BREAKER_WINDOW
from outbox._shared.text import counted

log = logging.getLogger("dispatcher.completer")
_MAX_BATCH = 1000
WRITE_GAP = 0.005
"""Seconds at least between the starts of two writes: under load results gather into one
statement instead of one each (a fleet of dispatchers each sees a share of the load);
after a quiet spell the first result is written at once."""


@dataclass(slots=True)
class _Batch:
    records: list[Record] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)
    verdicts: list[tuple[int, CircuitVerdict, float]] = field(default_factory=list)
    disables: dict[int, str] = field(default_factory=dict)  # endpoint id -> reason (a 410)

    def __len__(self) -> int:
        return len(self.records) + len(self.slots) + len(self.verdicts) + len(self.disables)



class Completer:
    """Writes results in batches; drops the leases of what was written, then calls ``wake``.

    ``written`` counts the records written so far (``--once`` watches it);
    ``describe`` names an endpoint by id for the log; ``slots``: the slots held, which
    forgets those freed.
    """

    def __init__(self, db: Database, leases: Leases, wake: Callable[[], None],
                 give_up: asyncio.Event, describe: Callable[[int], str] = str, *,
                 slots: SlotBook | None = None) -> None:
        self._db = db
        self._leases = leases
        self._slots = slots if slots is not None else SlotBook()
        self._wake = wake
        self._give_up = give_up
        self._describe = describe
        self._queue = _Batch()
        self._ready = asyncio.Event()
        self._closing = False
        self._writing = 0
        self._tally = circuit.Tally(time.time)
        self.written = 0

    def add(self, record: Record) -> None:
        self._queue.records.append(record)
        self._ready.set()

    def hand_back(self, deliveries: list[Delivery]) -> None:
        """Claims never sent: pending again at once, the attempt taken back, last error kept."""
        for d in deliveries:
            self.add(Record(d.id, d.lease_token, "released", refund=True))

    def free(self, slot: Slot) -> None:
        """Give a request slot back to the fleet."""
        self._queue.slots.append(slot)
        self._ready.set()

    def judge(self, endpoint_id: int, verdict: CircuitVerdict,
              window: float = DEFAULT_BREAKER_WINDOW) -> None:
        """One attempt's word on its endpoint, for the circuit breaker (``window``: the
        endpoint's ``--breaker-window``)."""
        self._queue.verdicts.append((endpoint_id, verdict, window))
        self._ready.set()

    def disable(self, endpoint_id: int, reason: str) -> None:
        """Pause the endpoint (a ``410 Gone``), written with the next batch of results."""
        self._queue.disables[endpoint_id] = reason
        self._ready.set()

    def pending(self) -> int:
        """Results not yet written, including the batch being written now."""
        return len(self._queue) + self._writing

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._closing = True
        self._ready.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last = -WRITE_GAP
        while True:
            await self._ready.wait()
            self._ready.clear()
            while len(self._queue):
                gap = last + WRITE_GAP - loop.time()
                if gap > 0 and not self._closing:
                    await asyncio.sleep(gap)
                last = loop.time()
                batch = self._take()
                self._writing = len(batch)
                try:
                    written = await retry_until(functools.partial(self._write, batch),
                                                self._give_up)
                finally:
                    self._writing = 0
                if written is None:
                    log.warning("could not record %s before giving up; their leases "
                                "will expire and they will be delivered again",
                                counted(len(batch.records), "result"))
                    return
                self._done(batch, written)
            if self._closing:
                return

    def _take(self) -> _Batch:
        """The next batch: records up to the cap, with every slot and verdict waiting."""
        queue = self._queue
        batch = _Batch(queue.records[:_MAX_BATCH], queue.slots, queue.verdicts,
                       queue.disables)
        self._queue = _Batch(queue.records[_MAX_BATCH:])
        return batch

    def _done(self, batch: _Batch, written: frozenset[int]) -> None:
        self.written += len(batch.records)
        self._leases.drop(record.delivery_id for record in batch.records)
        self._slots.freed(batch.slots)
        if len(written) < len(batch.records):
            log.info("%s discarded: their leases had been taken over",
                     counted(len(batch.records) - len(written), "result"))
        self._wake()

    async def _write(self, batch: _Batch) -> frozenset[int]:
        # Pauses first: they may be written twice (a retry after an outage), results once.
        for endpoint_id, reason in batch.disables.items():
            await self._db.fetch("disable_endpoint", {"id": endpoint_id, "reason": reason})
        [row] = await self._db.fetch("complete", {
            "results": json.dumps([record.as_row() for record in batch.records]),
            "slots": slots_json(batch.slots),
            "circuits": circuit.fold(batch.verdicts, self._tally)})
        completed = Completed.from_row(row)
        circuit.settle(batch.verdicts, self._tally, completed.counted)
        for change in completed.changed:
            level = logging.WARNING if change.now == "open" else logging.INFO
            log.log(level, "circuit of endpoint %s: %s -> %s",
                    self._describe(change.endpoint_id), change.was, change.now)
        return completed.written
