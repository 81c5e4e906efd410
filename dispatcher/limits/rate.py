"""The rate limit (``--rate-limit N``): turns the fleet shares, and their pace.

The claim statement (``claim`` in dispatch.sql) hands out turns from the
endpoint's shared clock (``endpoint_state.next_turn``) and tells each request
how long to wait for its turn (``send_in``); ``due_endpoints`` counts an
endpoint as due once its next turn is within RATE_HORIZON. This module is the
Python half: the pace the statement uses, how far ahead turns are taken, and
when the claimer should look again.
"""

from __future__ import annotations

from typing import Final

from dispatcher.policy.model import Endpoint

PACE: Final = 1.05
"""Turns go PACE/N seconds apart, not 1/N: N + 1 requests then span 1.05 s, so that a request
that leaves up to 50 ms late (a busy event loop, a slow claim) still finds no one-second window
holding more than N. The cap is what the user asked for; a twentieth of its pace is the price
of holding it. The claim statement takes it as its ``pace`` parameter."""

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
