"""Dispatchers killed, stopped and run side by side: nothing committed is lost.

Every test runs real ``python -m dispatcher`` processes against a real
database and a real HTTP receiver, breaks something for real (SIGKILL,
SIGTERM, a second dispatcher) and then checks the database and what the
receiver saw. Faults at chosen moments (a freeze past the lease, a hang past
the grace, a crash between two steps) are in the catalogue,
``test_catalogue_*.py``. Leases are never shorter than an endpoint's timeout plus
15 seconds (see ``DispatcherConfig.lease``), so endpoints here use short
timeouts to keep the waits for expired leases short.
"""

from __future__ import annotations

import signal
from collections import Counter

import psycopg
import pytest

from outbox.testing import Receiver
from tests.support.resilience import (
    Fleet,
    Tracker,
    add_endpoint,
    all_delivered,
    duplicates,
    publish,
    received_ids,
    states,
    summary,
    wait_until,
)

pytestmark = pytest.mark.slow
# Lease floor for a 1 s endpoint timeout: 1 + 15 s, plus rescue period and slack.
RESCUE_WAIT = 45.0


def test_sigkill_mid_stream_loses_nothing(dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """A dispatcher killed by SIGKILL mid-stream loses nothing: a new one delivers every event."""
    tracker = Tracker(delay=0.05)
    receiver.responder = tracker
    add_endpoint(dsn, receiver.url, timeout_seconds=1.0)
    published = publish(dsn, 500)

    first = fleet.start("--concurrency", "16")
    receiver.wait_for(100, timeout=30)
    first.signal(signal.SIGKILL)
    first.wait(timeout=10)
    at_kill = states(dsn)
    assert at_kill["delivered"] < 500, "the stream ended before the kill; nothing was tested"

    fleet.start("--concurrency", "16")
    wait_until(lambda: all_delivered(dsn, 500), RESCUE_WAIT, "all 500 deliveries delivered")

    got = received_ids(receiver)
    assert set(got) == set(published)
    summary("sigkill", states_at_kill=dict(at_kill), requests=len(got),
            duplicates=duplicates(got))


def test_sigterm_finishes_in_flight_and_hands_back_the_rest(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """SIGTERM finishes requests in flight, hands back unsent claims uncharged, exits 0."""
    tracker = Tracker(delay=1.0)
    receiver.responder = tracker
    # The rate limit makes the claimer take a few deliveries that must wait
    # for a token: claims not sent yet when the signal comes.
    add_endpoint(dsn, receiver.url, max_in_flight=8, rate_limit=4)
    published = publish(dsn, 16)

    dispatcher = fleet.start("--shutdown-grace", "10")
    receiver.wait_for(4, timeout=20)
    dispatcher.signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=20) == 0
    assert tracker.in_flight() == 0, "the dispatcher exited before its requests were answered"

    sent = Counter(received_ids(receiver))
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT event_id::text, state, attempts FROM outbox.deliveries")
        by_event = {event_id: (state, attempts) for event_id, state, attempts in rows}
    assert set(by_event) == set(published)
    assert all(state in ("delivered", "pending") for state, _ in by_event.values())
    for event_id, (state, attempts) in by_event.items():
        # Every attempt charged was a request the receiver saw, and vice versa.
        assert attempts == sent[event_id], (event_id, state, attempts, sent[event_id])
        assert (state == "delivered") == (sent[event_id] == 1)

    tracker.delay = 0.0
    fleet.start()
    wait_until(lambda: all_delivered(dsn, 16), 30, "the rest delivered by a new dispatcher")
    assert set(received_ids(receiver)) == set(published)
    summary("sigterm", sent_before_stop=len(sent),
            pending_after_stop=sum(1 for s, _ in by_event.values() if s == "pending"))


def test_dispatchers_share_the_load_and_never_double_fly(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """Three dispatchers on one database: no event in flight twice at once, all delivered."""
    tracker = Tracker(delay=0.01)
    receiver.responder = tracker
    add_endpoint(dsn, receiver.url, max_in_flight=64)
    dispatchers = [fleet.start("--concurrency", "8") for _ in range(3)]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)

    published = publish(dsn, 1000, per_transaction=50)
    wait_until(lambda: all_delivered(dsn, 1000), 60, "all 1000 deliveries delivered")

    got = received_ids(receiver)
    assert tracker.overlaps == [], f"in flight twice at once: {tracker.overlaps[:5]}"
    assert set(got) == set(published)
    wait_until(lambda: sum(d.metric("outbox_delivered_total") for d in dispatchers) >= 1000,
               10, "the delivered counters to add up")
    shares = [int(d.metric("outbox_delivered_total")) for d in dispatchers]
    assert all(share > 0 for share in shares), f"some dispatcher delivered nothing: {shares}"
    summary("three-dispatchers", shares=shares, duplicates=duplicates(got),
            peak_in_flight=tracker.peak)
