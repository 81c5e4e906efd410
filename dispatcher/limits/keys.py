"""Per-key order: a keyed delivery goes only once every earlier delivery of its key (lower
``seq``) for that endpoint has finished.

The order itself is enforced in SQL, in the one place every dispatcher goes
through: the claim's key check (``claim`` in dispatch.sql), and the complete
statement hands a finished delivery's turn to the next one of its key
(``unparked``). This module is the Python half: parking. A key with a deep
backlog would make every claim walk the rows waiting behind it; when a claim
was slow, the claimer parks the blocked ones (``park_blocked``), and the
maintainer unparks what the complete statement could not (``unpark_orphans``).
Ordering never depends on parking.
"""

from __future__ import annotations

import logging
from typing import Final

from dispatcher.db import Database
from outbox._shared.text import counted

log = logging.getLogger("dispatcher")

PARK_AFTER: Final = 0.05
"""A claim slower than this (seconds) is taken as a walk over keyed rows waiting behind their
key: they are parked."""
PARK_BUDGET: Final = 5000
"""Rows one parking statement looks at, at most: bounded by rows looked at, not found, so that
a slow claim on a busy database never turns into a scan of a large unkeyed backlog."""


async def park(db: Database, endpoint_ids: list[int]) -> int:
    """Park keyed deliveries of these endpoints stuck behind their key; how many."""
    parked = await db.fetch("park_blocked", {"endpoint_ids": endpoint_ids,
                                             "budget": PARK_BUDGET})
    if parked:
        log.info("parked %s waiting behind earlier events of their key",
                 counted(len(parked), "delivery", "deliveries"))
    return len(parked)
