"""The promises of a fleet: several real dispatchers on one database, held to one limit.

Every test starts two or three ``python -m dispatcher`` processes against the
same database and a real receiver on 127.0.0.1, then checks what the
receiver saw: never more requests at once than --max-in-flight, never more
in a second than --rate-limit allows, nothing sent but one probe per
cool-down while a circuit is open, key order across overlapping
transactions, and the fleet's upkeep taken over when its maintainer dies.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import threading
import time
from typing import Any

import psycopg

import outbox
from outbox.testing import Receiver, Request, Response
from tests.support.cli import run_outbox
from tests.support.dispatcher import wait_until
from tests.support.resilience import (
    Fleet,
    Tracker,
    add_endpoint,
    all_delivered,
    publish,
    received_ids,
    states,
)
from tests.support.stamped import StampedReceiver


def test_max_in_flight_holds_for_three_dispatchers(dsn: str, receiver: Receiver,
                                                    fleet: Fleet) -> None:
    """Three dispatchers, --max-in-flight 3: the receiver never sees more than 3 at once."""
    tracker = Tracker(delay=0.05)
    receiver.responder = tracker
    add_endpoint(dsn, receiver.url, max_in_flight=3)
    publish(dsn, 90)
    for _ in range(3):
        fleet.start()
    wait_until(lambda: all_delivered(dsn, 90), 60, "90 deliveries")
    assert tracker.peak <= 3, f"peak {tracker.peak} requests at once"
    assert tracker.peak == 3  # the limit was reached, so it was what held them back
    assert not tracker.overlaps


def test_dispatchers_share_an_endpoint_one_cannot_fill(dsn: str, receiver: Receiver,
                                                      fleet: Fleet) -> None:
    """--max-in-flight 6, three dispatchers of --concurrency 2: more than one does the work."""
    tracker = Tracker(delay=0.05)
    receiver.responder = tracker
    add_endpoint(dsn, receiver.url, max_in_flight=6)
    dispatchers = [fleet.start("--concurrency", "2") for _ in range(3)]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    publish(dsn, 120)
    wait_until(lambda: all_delivered(dsn, 120), 60, "120 deliveries")
    shares = [int(d.metric("outbox_delivered_total")) for d in dispatchers]
    assert sum(1 for share in shares if share) >= 2, f"one dispatcher did it all: {shares}"
    assert tracker.peak <= 6


def test_rate_limit_holds_for_three_dispatchers(dsn: str, fleet: Fleet) -> None:
    """Three dispatchers, --rate-limit 10: no one-second window holds more than 10 requests."""
    # Arrivals by the kernel's clock: a receiver thread that reads a request late
    # on a busy machine would move it closer to the next ones (tests.support.stamped).
    with StampedReceiver() as receiver:
        add_endpoint(dsn, receiver.url, rate_limit=10.0, max_in_flight=50)
        published = publish(dsn, 40)
        for _ in range(3):
            fleet.start()
        wait_until(lambda: all_delivered(dsn, 40), 60, "40 deliveries")
        arrivals = receiver.arrivals()
    assert sorted(event_id for _, event_id in arrivals) == sorted(published)
    times = [at for at, _ in arrivals]
    busiest = max(sum(1 for t in times[i:] if t - start < 1.0)
                  for i, start in enumerate(times))
    gaps = [round((b - a) * 1000) for a, b in itertools.pairwise(times)]
    assert busiest <= 10, f"{busiest} requests within one second; gaps in ms: {gaps}"


def test_a_killed_dispatchers_slots_come_back_within_its_lease(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """SIGKILLed while holding every slot: another dispatcher sends again once the lease ends."""
    hang = True

    async def respond(_: Request) -> Response:
        if hang:
            await asyncio.sleep(30)  # the first requests never end while their sender lives
        return Response(200)

    receiver.responder = respond
    # Leases last the longest endpoint timeout plus 15 s: 16 s here.
    add_endpoint(dsn, receiver.url, max_in_flight=2, timeout_seconds=1.0)
    publish(dsn, 6)
    first = fleet.start(lease=3)
    wait_until(lambda: len(receiver.snapshot()) >= 2, 20, "the first two requests")
    hang = False
    first.signal(signal.SIGKILL)
    killed_at = time.time()
    fleet.start(lease=3)
    wait_until(lambda: len(receiver.snapshot()) >= 3, 40, "a request after the kill")
    later = [r.received_at for r in receiver.snapshot()[2:]]
    assert min(later) - killed_at >= 10.0  # not before the killed one's slot leases ran out
    wait_until(lambda: all_delivered(dsn, 6), 60, "every delivery, rescued ones too")


def _circuit(dsn: str) -> str:
    status = json.loads(run_outbox(dsn, "status", "--json").stdout)
    return str(status["endpoints"][0]["circuit"])


def test_breaker_holds_the_fleet_through_an_outage(dsn: str, receiver: Receiver,
                                                   fleet: Fleet) -> None:
    """Three dispatchers, a 30 s outage, --max-attempts 3: the circuit opens after 3 failures,
    one probe goes out per cool-down, nothing is dead-lettered, and it closes on success."""
    down = True
    arrivals: list[tuple[float, int]] = []

    def respond(_: Request) -> Response:
        status = 503 if down else 200
        arrivals.append((time.monotonic(), status))
        return Response(status)

    receiver.responder = respond
    add_endpoint(dsn, receiver.url, max_attempts=3, breaker_failures=3,
                 breaker_cooldown_seconds=3.0, max_in_flight=4, min_backoff_seconds=0.5,
                 max_backoff_seconds=1.0)
    dispatchers = [fleet.start() for _ in range(3)]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    publish(dsn, 30)
    wait_until(lambda: _circuit(dsn) != "closed", 20, "the circuit to open")
    opened = time.monotonic()
    wait_until(lambda: all(d.metric("outbox_circuit_open") == 1 for d in dispatchers), 10,
               "the gauge to show the circuit open")
    while time.monotonic() - opened < 30:
        assert states(dsn)["dead"] == 0, "a delivery died while the circuit was open"
        time.sleep(0.5)
    settled = [t for t, _ in arrivals if t > opened + 1.0]  # requests in flight have ended
    gaps = [b - a for a, b in itertools.pairwise(settled)]
    assert settled, "no probe in 30 s"
    assert min(gaps, default=3.0) >= 2.5, f"probes closer than the cool-down: {gaps}"
    assert len(settled) <= 30 / 3.0 + 1
    down = False
    wait_until(lambda: all_delivered(dsn, 30), 60, "every delivery after the outage")
    assert _circuit(dsn) == "closed"
    wait_until(lambda: all(d.metric("outbox_circuit_open") == 0 for d in dispatchers), 10,
               "the gauge to show the circuit closed")


def _breaker_rows(dsn: str) -> dict[str, tuple[Any, ...]]:
    """Per endpoint: its circuit, when it last opened, and the failed attempts recorded up to
    that moment (the attempt history, on the database clock)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT e.name, s.circuit, s.opened_at,"
            " (SELECT count(*) FROM outbox.attempts a JOIN outbox.deliveries d"
            "  ON d.id = a.delivery_id WHERE d.endpoint_id = e.id AND a.at <= s.opened_at)"
            " FROM outbox.endpoints e JOIN outbox.endpoint_state s ON s.endpoint_id = e.id")
        return {str(name): tuple(rest) for name, *rest in rows}


def test_breaker_counts_a_share_of_the_fleets_attempts(dsn: str, receiver: Receiver,
                                                       fleet: Fleet) -> None:
    """Three dispatchers, --breaker-failures 5: an endpoint failing bursts of five requests in
    every forty keeps its circuit closed and gets every event; one failing everything opens
    within five failures per dispatcher."""
    sent = {"bursty": 0, "down": 0}
    lock = threading.Lock()

    def respond(request: Request) -> Response:
        name = request.path.strip("/")
        with lock:
            n = sent[name]
            sent[name] = n + 1
        return Response(503 if name == "down" or n % 40 >= 35 else 200)

    receiver.responder = respond
    for name in ("bursty", "down"):
        add_endpoint(dsn, receiver.url + name, name=name, breaker_failures=5,
                     breaker_cooldown_seconds=60.0, max_in_flight=8, max_attempts=40,
                     events=[f"{name}.*"], events_like=[f"{name}.%"])
    dispatchers = [fleet.start() for _ in range(3)]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    publish(dsn, 400, type_="bursty.thing")
    publish(dsn, 40, type_="down.thing")
    wait_until(lambda: states(dsn)["delivered"] == 400, 120, "every bursty event")
    wait_until(lambda: _breaker_rows(dsn)["down"][0] == "open", 30, "the down circuit to open")
    rows = _breaker_rows(dsn)
    assert rows["bursty"][:2] == ("closed", None), f"bursty opened: {rows}"
    assert sent["bursty"] >= 440  # its bursts failed: 5 in every 40, all retried
    _, opened_at, failed_before = rows["down"]
    assert opened_at is not None
    assert 5 <= failed_before <= 5 * 3, rows


def test_overlapping_transactions_on_one_key_deliver_in_publish_order(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """The later transaction of a key waits for the earlier one; rolled back, it goes alone."""
    add_endpoint(dsn, receiver.url)
    fleet.start()

    def second_publisher(ready: threading.Event, done: threading.Event,
                         number: int) -> threading.Thread:
        def run() -> None:
            with psycopg.connect(dsn) as conn:
                ready.set()
                outbox.publish(conn, "order.changed", {"n": number}, key="order-1")
                conn.commit()
            done.set()
        thread = threading.Thread(target=run)
        thread.start()
        return thread

    with psycopg.connect(dsn) as earlier:
        outbox.publish(earlier, "order.changed", {"n": 1}, key="order-1")
        ready, done = threading.Event(), threading.Event()
        later = second_publisher(ready, done, 2)
        ready.wait(10)
        assert not done.wait(1.0), "the later publish did not wait for the earlier transaction"
        status = run_outbox(dsn, "status").stdout
        assert "publishers waiting for a key: 1 (longest" in status, status
        earlier.commit()
    later.join(10)
    assert done.is_set()
    wait_until(lambda: len(receiver.snapshot()) == 2, 20, "both events")
    assert [json.loads(r.body)["data"]["n"] for r in receiver.snapshot()] == [1, 2]

    with psycopg.connect(dsn) as rolled_back:
        outbox.publish(rolled_back, "order.changed", {"n": 3}, key="order-1")
        ready, done = threading.Event(), threading.Event()
        later = second_publisher(ready, done, 4)
        ready.wait(10)
        assert not done.wait(1.0)
        rolled_back.rollback()
    later.join(10)
    wait_until(lambda: len(receiver.snapshot()) == 3, 20, "the surviving event")
    time.sleep(0.5)  # a wrongly sent rolled-back event would have arrived by now
    assert [json.loads(r.body)["data"]["n"] for r in receiver.snapshot()] == [1, 2, 4]


def _maintainer(fleet: Fleet) -> int:
    holders = [i for i, d in enumerate(fleet.started)
               if d.alive() and d.log().count("now the fleet's maintainer")
               > d.log().count("no longer the fleet's maintainer")]
    return holders[0] if len(holders) == 1 else -1


def test_another_dispatcher_takes_over_when_the_maintainer_is_killed(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """The maintainer SIGKILLed: another takes over rescue and retention within seconds."""
    endpoint_id = add_endpoint(dsn, receiver.url, events=["order.*"], events_like=["order.%"])
    stranded, old = publish(dsn, 2, type_="unrouted.thing")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # A delivery leased by a dispatcher that died long ago, and one delivered long ago.
        conn.execute(
            "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, attempts, "
            "lease_token, lease_expires_at) SELECT id, %s, seq, 'in_flight', 1, "
            "gen_random_uuid(), now() + interval '1 hour' FROM outbox.events WHERE id = %s",
            (endpoint_id, stranded))
        conn.execute(
            "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, finished_at) "
            "SELECT id, %s, seq, 'delivered', now() - interval '2 hours' "
            "FROM outbox.events WHERE id = %s", (endpoint_id, old))
        conn.execute("UPDATE outbox.events SET created_at = now() - interval '2 hours' "
                     "WHERE id = %s", (old,))
    for _ in range(2):
        fleet.start("--retention", "1h")
    wait_until(lambda: _maintainer(fleet) >= 0, 20, "one maintainer")
    maintainer = fleet.started[_maintainer(fleet)]
    maintainer.signal(signal.SIGKILL)
    maintainer.wait(10)
    with psycopg.connect(dsn, autocommit=True) as conn:  # its lease runs out now
        conn.execute("UPDATE outbox.deliveries SET lease_expires_at = now() - interval '1 s' "
                     "WHERE event_id = %s", (stranded,))
    wait_until(lambda: _maintainer(fleet) >= 0, 30, "a new maintainer")
    wait_until(lambda: stranded in received_ids(receiver), 30, "the rescued delivery")
    wait_until(lambda: states(dsn) == {"delivered": 1}, 30, "the old delivery purged")


def test_one_endpoints_backlog_does_not_hold_back_another(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """A deep, slow backlog on one endpoint: another endpoint's events still flow at once."""
    slow = Tracker(delay=0.2)
    fast = Tracker()

    async def respond(request: Request) -> Response:
        return await (slow if request.path == "/big" else fast)(request)

    receiver.responder = respond
    add_endpoint(dsn, receiver.url + "big", name="big", max_in_flight=8,
                 events=["big.*"], events_like=["big.%"])
    add_endpoint(dsn, receiver.url + "small", name="small",
                 events=["small.*"], events_like=["small.%"])
    publish(dsn, 20_000, per_transaction=5000, type_="big.thing")
    for _ in range(2):
        fleet.start()
    wait_until(lambda: len(receiver.snapshot()) > 20, 20, "the big backlog to flow")
    publish(dsn, 50, type_="small.thing")
    wait_until(lambda: sum(r.path == "/small" for r in receiver.snapshot()) == 50, 20,
               "the small endpoint's events")
    assert states(dsn)["pending"] > 10_000  # the big backlog is far from done
    assert not fast.overlaps

