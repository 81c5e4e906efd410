"""Dispatchers killed, stopped, frozen and run side by side: nothing committed is lost.

Every test runs real ``python -m dispatcher`` processes against a real
database and a real HTTP receiver, breaks something for real (SIGKILL,
SIGTERM, SIGSTOP, a second dispatcher) and then checks the database and what
the receiver saw. Leases are never shorter than an endpoint's timeout plus
15 seconds (see ``DispatcherConfig.lease``), so endpoints here use short
timeouts to keep the waits for expired leases short.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter

import psycopg
import pytest

from outbox.testing import Receiver
from outbox.testing._receiver import Request, Response
from tests.support.resilience import (
    Fleet,
    Gate,
    Tracker,
    add_endpoint,
    all_delivered,
    delivery_row,
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


def test_sigterm_with_hanging_receiver_gives_the_delivery_back(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """SIGTERM with a request hanging past --shutdown-grace: exit 0, the delivery is pending."""
    release = Gate()

    async def hang(request: Request) -> Response:
        await release.wait()
        return Response(200)

    receiver.responder = hang
    add_endpoint(dsn, receiver.url, timeout_seconds=60.0)
    [event_id] = publish(dsn, 1)

    dispatcher = fleet.start("--shutdown-grace", "1")
    receiver.wait_for(1, timeout=20)
    started = time.monotonic()
    dispatcher.signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=15) == 0
    took = time.monotonic() - started

    row = delivery_row(dsn, event_id)
    assert row["state"] == "pending", row
    assert row["attempts"] == 1, row
    assert row["lease_token"] is None, row
    assert row["last_error"], row

    release.open()
    fleet.start()
    wait_until(lambda: all_delivered(dsn, 1), 30, "the delivery delivered after the restart")
    assert delivery_row(dsn, event_id)["attempts"] == 2
    summary("sigterm-hanging", seconds_to_exit=round(took, 2), last_error=row["last_error"])


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


def test_frozen_dispatchers_late_results_are_discarded(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """A dispatcher frozen past its lease: another takes over, its late results change nothing."""
    # Two deliveries are frozen with the first dispatcher. By the time its late
    # 500s come back, the second dispatcher has delivered one (a late write
    # would turn it back to pending) and still has the other in flight under
    # its own lease (a late write would steal it). Both must be ignored.
    release_first = Gate()
    release_second = Gate()
    late_answers = Counter[str]()
    arrivals = Counter[str]()
    frozen_ids: list[str] = []  # the two deliveries the frozen dispatcher holds

    async def respond(request: Request) -> Response:
        webhook_id = request.header("webhook-id") or ""
        arrivals[webhook_id] += 1
        if webhook_id not in frozen_ids:
            return Response(200)
        if arrivals[webhook_id] == 1:  # the frozen dispatcher's attempts
            await release_first.wait()
            late_answers[webhook_id] += 1
            return Response(500)
        if webhook_id == frozen_ids[1]:  # the rescuer's attempt that stays in flight
            await release_second.wait()
        return Response(200)

    receiver.responder = respond
    add_endpoint(dsn, receiver.url, timeout_seconds=1.0)
    frozen_ids.extend(publish(dsn, 2))
    done_early, in_flight = frozen_ids

    frozen = fleet.start()
    receiver.wait_for(2, timeout=20)
    frozen.signal(signal.SIGSTOP)
    try:
        later = publish(dsn, 20)
        rescuer = fleet.start()
        wait_until(lambda: delivery_row(dsn, done_early)["state"] == "delivered", RESCUE_WAIT,
                   "the second dispatcher to take over and deliver a frozen delivery")
        wait_until(lambda: arrivals[in_flight] == 2, 10, "the rescuer's attempt in flight")
        taken = delivery_row(dsn, in_flight)
        assert taken["state"] == "in_flight", taken
        assert taken["attempts"] == 2, taken
        release_first.open()
        wait_until(lambda: sum(late_answers.values()) == 2, 10, "the late 500s to be sent")
    finally:
        frozen.signal(signal.SIGCONT)

    def discarded() -> int:
        return sum(int(n) for n in re.findall(r"(\d+) results discarded", frozen.log()))

    def overwritten() -> bool:
        return (delivery_row(dsn, in_flight) != taken
                or delivery_row(dsn, done_early)["state"] != "delivered")
    wait_until(lambda: discarded() >= 2 or overwritten(), 20,
               "the frozen dispatcher to try its late writes")
    assert delivery_row(dsn, in_flight) == taken, "a late result overwrote the new owner's lease"
    assert delivery_row(dsn, done_early)["state"] == "delivered", "a late result undid a delivery"

    release_second.open()
    wait_until(lambda: all_delivered(dsn, 22), 30, "every event delivered")
    for event_id in (done_early, in_flight):
        row = delivery_row(dsn, event_id)
        assert row["last_status"] == 200, row
        assert row["last_error"] is None, row
        assert row["attempts"] == 2, row
        assert arrivals[event_id] == 2, (row, arrivals[event_id])
    assert set(received_ids(receiver)) == {done_early, in_flight, *later}
    assert frozen.alive()
    assert rescuer.alive()
    summary("frozen", discarded=discarded(), requests=len(received_ids(receiver)))
