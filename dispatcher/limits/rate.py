"""The rate limit (``--rate-limit N``): turns the fleet shares, and their pace.

The claim statement (``claim`` in dispatch.sql) hands out turns from the
endpoint's shared clock (``endpoint_state.next_turn``) and tells each request
how long to wait for its turn (``send_in``); ``due_endpoints`` counts an
endpoint as due once its next turn is within RATE_HORIZON. This module is the
Python half: the pace the statement uses, how far ahead turns are taken, and
when the claimer should look again.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Final

from dispatcher.policy.model import Endpoint

PACE: Final = 1.05
"""Turns go PACE/N seconds apart, not 1/N: N + 1 requests then span 1.05 s, so that a request
that leaves up to 50 ms late (a busy event loop, a slow claim) still finds no one-second window
holding more than N. The cap is what the user asked for; a twentieth of its pace is the price
of holding it. The claim statement takes it as its ``pace`` parameter."""

LATE: Final = (PACE - 1.0) / 2
"""Seconds after its turn a request may still start on its way, at most: half the slack PACE
leaves (25 ms); the other half is for the way from that look to the wire (the request is
built, signed and written after it). Later (a dispatcher starved of CPU, say), it would
bunch with the turns after it and the endpoint would see more than N requests within a
second: it gives the turn up and is handed back, for a later claim to give it a new one."""

TRIPS: Final = 64
"""Claims whose round trips :class:`Turns` remembers, to find the shortest."""

TRIPS_TRUSTED: Final = 8
"""Round trips needed before the shortest counts: a dispatcher's first claims are often slow
(a cold process, a busy machine), and taken for the way to the database, one would hide
how late its requests leave. Until then the way there counts as nothing."""


class Turns:
    """Where a claim's turns fall on this process's monotonic clock, at the earliest.

    A request waits ``send_in`` from the moment its claim's answer is read: never
    early, but late by however long the answer waited to be read (a process
    starved of CPU). Its lateness is measured from an earlier moment: the claim's
    start, plus the turn's distance from the statement's start (``turn_at -
    db_now``, both on the database clock), plus the way there, taken as half the
    shortest round trip of recent claims (a database far away, not a slow one;
    nothing until TRIPS_TRUSTED claims were made).
    """

    def __init__(self) -> None:
        self._trips: deque[float] = deque(maxlen=TRIPS)

    def claimed(self, started: float, answered: float) -> None:
        """A claim sent at ``started`` was answered at ``answered`` (monotonic)."""
        self._trips.append(answered - started)

    def last_moment(self, started: float, db_now: datetime, turn_at: datetime) -> float:
        """The latest moment (monotonic) a request whose turn is ``turn_at`` may leave."""
        way_there = min(self._trips) / 2 if len(self._trips) >= TRIPS_TRUSTED else 0.0
        return started + way_there + (turn_at - db_now).total_seconds() + LATE

RATE_HORIZON: Final = 0.25
"""Seconds ahead a rate-limited endpoint's turns may be taken: its requests wait their
turn, so that one claim keeps it busy until the claimer looks again."""


def next_look(endpoint: Endpoint, send_in: float) -> float | None:
    """Seconds until a claim could take ``endpoint``'s next turn, given that its last
    request granted waits ``send_in``; None without a rate limit.

    The statement puts that turn PACE/N after the last one it granted, and grants it
    RATE_HORIZON ahead (tests/integration/test_rate_pace.py compares the two)."""
    if endpoint.rate_limit is None:
        return None
    return send_in + PACE / endpoint.rate_limit - RATE_HORIZON


def keeps_spare_slots(endpoint: Endpoint) -> bool:
    """Whether a slot whose request ended may be kept for the next claim: not under a
    rate limit, whose turns come with new requests (the slot goes back to the fleet)."""
    return endpoint.rate_limit is None
