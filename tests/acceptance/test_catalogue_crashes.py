"""Fault catalogue: dispatchers and PostgreSQL crash at chosen moments; nothing is lost.

Each test breaks one step of a delivery for real (SIGKILL, SIGSTOP,
SIGTERM, PostgreSQL stopped with ``-m immediate``), then checks the
outcome the guarantees promise and that every committed event reached the
receiver. A lease running out is made by back-dating it
(``tests.support.faults.expire_leases``), never waited for. RELIABILITY.md
lists the cases.
"""

from __future__ import annotations

import re
import signal
from collections import Counter

import psycopg
import pytest

from outbox.testing import Receiver, Request, Response, TemporaryPostgres
from tests.support.faults import Producer, crash, expire_leases, frozen, sender_of
from tests.support.hostile import Act, HostileReceiver
from tests.support.proxy import FaultProxy
from tests.support.resilience import (
    DispatcherProcess,
    Fleet,
    Gate,
    Tracker,
    add_endpoint,
    all_delivered,
    delivery_row,
    holds_for,
    nothing_lost,
    publish,
    received_ids,
    states,
    wait_until,
)

pytestmark = pytest.mark.slow


def test_crash_after_the_post_before_the_result_is_written(dsn: str, fleet: Fleet) -> None:
    """Killed after the receiver answered, before recording: sent once more, same webhook-id."""
    first: list[DispatcherProcess] = []

    def script(_: Request, attempt: int) -> Act:
        if attempt == 1:
            first[0].signal(signal.SIGSTOP)  # the answer below is never read
        return Act.answer(200)

    with HostileReceiver(script) as receiver:
        add_endpoint(dsn, receiver.url, timeout_seconds=1.0)
        first.append(fleet.start())
        [event_id] = publish(dsn, 1)
        wait_until(lambda: receiver.tries[event_id] == 1, 20, "the first POST")
        first[0].kill()
        assert delivery_row(dsn, event_id)["state"] == "in_flight"
        assert expire_leases(dsn) == 1
        later = publish(dsn, 3)
        fleet.start()
        wait_until(lambda: all_delivered(dsn, 4), 20, "every event delivered")
        requests = receiver.snapshot()
    assert [r.header("webhook-id") for r in requests].count(event_id) == 2
    assert {r.header("webhook-id") for r in requests} == {event_id, *later}
    assert len(requests) == 5  # the one forced duplicate, nothing else twice
    assert delivery_row(dsn, event_id)["attempts"] == 2


def test_crash_right_after_claiming(dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """Killed between the claim and the POST reaching the receiver: delivered once, later."""
    with FaultProxy(receiver.port) as proxy:
        proxy.blackhole()  # the request leaves the dispatcher and goes nowhere
        add_endpoint(dsn, proxy.url(), timeout_seconds=5.0)
        [event_id] = publish(dsn, 1)
        first = fleet.start()
        wait_until(lambda: delivery_row(dsn, event_id)["state"] == "in_flight", 20,
                   "the claim")
        first.kill()
        assert receiver.count == 0
        proxy.heal()
        assert expire_leases(dsn) == 1
        fleet.start()
        wait_until(lambda: all_delivered(dsn, 1), 20, "the delivery after the rescue")
    assert received_ids(receiver) == [event_id]
    # The claim's attempt stays charged: a rescuer cannot know it never arrived.
    assert delivery_row(dsn, event_id)["attempts"] == 2


def test_zombie_results_are_fenced_after_a_takeover(
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

    zombie = fleet.start()
    receiver.wait_for(2, timeout=20)
    with frozen(zombie):
        assert expire_leases(dsn) == 2  # frozen past its lease
        later = publish(dsn, 20)
        rescuer = fleet.start()
        wait_until(lambda: delivery_row(dsn, done_early)["state"] == "delivered", 20,
                   "the second dispatcher to take over and deliver a frozen delivery")
        wait_until(lambda: arrivals[in_flight] == 2, 10, "the rescuer's attempt in flight")
        taken = delivery_row(dsn, in_flight)
        assert taken["state"] == "in_flight", taken
        assert taken["attempts"] == 2, taken
        release_first.open()
        wait_until(lambda: sum(late_answers.values()) == 2, 10, "the late 500s to be sent")

    def discarded() -> int:
        return sum(int(n) for n in re.findall(r"(\d+) results discarded", zombie.log()))

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
    assert zombie.alive()
    assert rescuer.alive()


def test_receiver_hanging_past_the_shutdown_grace(
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
    dispatcher.signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=15) == 0

    row = delivery_row(dsn, event_id)
    assert row["state"] == "pending", row
    assert row["attempts"] == 1, row
    assert row["lease_token"] is None, row
    assert row["last_error"], row

    release.open()
    fleet.start()
    wait_until(lambda: all_delivered(dsn, 1), 30, "the delivery delivered after the restart")
    assert delivery_row(dsn, event_id)["attempts"] == 2
    assert received_ids(receiver) == [event_id, event_id]


def test_max_in_flight_holds_when_the_slot_holder_is_killed(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """SIGKILL of the dispatcher holding every slot: its slots come back, the limit holds."""
    release = Gate()
    tracker = Tracker()
    hanging = True

    async def respond(request: Request) -> Response:
        if hanging:
            await release.wait()
        return await tracker(request)

    receiver.responder = respond
    # A timeout far longer than the steps before the kill: on a loaded machine the second
    # dispatcher's start takes seconds, and a holder whose requests timed out meanwhile
    # would send its next three before it dies.
    add_endpoint(dsn, receiver.url, max_in_flight=3, timeout_seconds=30.0)
    published = publish(dsn, 60)
    holder = fleet.start()
    receiver.wait_for(3, timeout=20)
    idle = fleet.start()  # no slot left for it: it holds nothing
    idle.wait_status("/readyz", 200)
    holder.kill()
    hanging = False
    release.open()  # the killed dispatcher's requests end at the receiver, unanswered
    wait_until(lambda: tracker.in_flight() == 0, 10, "the abandoned requests to end")
    assert receiver.count == 3
    assert expire_leases(dsn) >= 3  # the requests, and any claims waiting in its memory
    fleet.start()
    wait_until(lambda: all_delivered(dsn, 60), 30, "every delivery")
    got = Counter(received_ids(receiver))
    assert set(got) == set(published)
    assert sum(got.values()) == 63  # the three abandoned requests, sent again
    assert tracker.peak <= 3, f"peak {tracker.peak} requests at once"
    assert not tracker.overlaps


def test_breaker_probe_holder_killed(dsn: str, fleet: Fleet) -> None:
    """The sender of a half-open circuit's probe is killed: one new probe, then recovery."""
    act = [Act.answer(503)]
    with HostileReceiver(lambda _request, _attempt: act[0]) as receiver:
        add_endpoint(dsn, receiver.url, max_attempts=3, breaker_failures=2,
                     breaker_cooldown_seconds=1.0, max_in_flight=1, timeout_seconds=30.0,
                     min_backoff_seconds=0.1, max_backoff_seconds=0.2)
        dispatchers = [fleet.start(), fleet.start()]
        for dispatcher in dispatchers:
            dispatcher.wait_status("/readyz", 200)
        published = publish(dsn, 10)
        wait_until(lambda: _circuit(dsn) == "open", 20, "the circuit to open")
        act[0] = Act.hang()  # the next request is the probe: it hangs
        wait_until(lambda: _circuit(dsn) == "half-open" and receiver.pending() == 1, 20,
                   "the probe to arrive")
        sent = len(receiver.snapshot())
        holder = sender_of(receiver.peers[-1], dispatchers)
        holder.kill()
        wait_until(lambda: receiver.pending() == 0, 10, "the probe's connection to close")
        expire_leases(dsn)  # the dead holder's probe, delivery and slot run out
        wait_until(lambda: len(receiver.snapshot()) == sent + 1, 20, "one new probe")
        holds_for(lambda: len(receiver.snapshot()) == sent + 1, 1.0,
                  "a single probe while half-open")
        act[0] = Act.answer(200)
        receiver.release()  # the new probe succeeds
        wait_until(lambda: all_delivered(dsn, 10), 30, "every delivery after recovery")
        requests = receiver.snapshot()
    assert states(dsn)["dead"] == 0
    assert _circuit(dsn) == "closed"
    assert {r.header("webhook-id") for r in requests} == set(published)
    survivor = next(d for d in dispatchers if d is not holder)
    assert survivor.alive()


def _circuit(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT circuit FROM outbox.endpoint_state").fetchone()
    assert row is not None
    return str(row[0])


def test_postgres_crash_loses_no_acknowledged_commit(
        server: TemporaryPostgres, dsn: str, receiver: Receiver, fleet: Fleet,
        fresh_db: str) -> None:
    """PostgreSQL stopped with -m immediate under load: acknowledged commits all delivered."""
    with psycopg.connect(dsn, autocommit=True) as conn:  # what production runs with
        conn.execute(f'ALTER DATABASE "{fresh_db}" SET synchronous_commit = on')
    receiver.responder = Tracker(delay=0.01)
    add_endpoint(dsn, receiver.url, timeout_seconds=1.0)
    before = publish(dsn, 200)
    dispatchers = [fleet.start("--concurrency", "8") for _ in range(2)]
    producer = Producer(dsn)
    producer.start()
    try:
        receiver.wait_for(30, timeout=30)
        crash(server)
        for dispatcher in dispatchers:
            dispatcher.wait_status("/readyz", 200, timeout=30)
        committed = len(producer.committed)
        wait_until(lambda: len(producer.committed) >= committed + 50, 20,
                   "the producer to commit again")
    finally:
        producer.stop()
    nothing_lost(dsn, receiver, [*before, *producer.committed], producer.in_doubt)
    assert all(d.alive() for d in dispatchers)
