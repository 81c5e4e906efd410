"""Fault catalogue: the database side: connections killed or cut, a busy fleet, odd settings.

Real dispatchers against the test's database, sometimes through the TCP
fault proxy (``tests.support.proxy``), with their connections told apart by
application_name. Each test checks its outcome and that every committed
event reached the receiver exactly as often as the fault forces.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict

import psycopg
import pytest

import outbox
from outbox.testing import Receiver, Request, TemporaryPostgres
from tests.support.faults import ClaimLog, ServerLog, backends, idle_holders, terminate
from tests.support.hostile import Act, HostileReceiver
from tests.support.proxy import FaultProxy
from tests.support.resilience import (
    Fleet,
    Tracker,
    add_endpoint,
    all_delivered,
    delivery_row,
    holds_for,
    publish,
    received_ids,
    wait_until,
)

pytestmark = pytest.mark.slow

_FLOOD = 20_000
"""Events of the flood, published 500 a transaction."""


def test_connections_killed_between_the_post_and_the_record(dsn: str, fleet: Fleet) -> None:
    """The result and claim connections terminated while the POST is answered: recorded once."""
    target: list[str] = []
    killed: list[int] = []

    def script(request: Request, _: int) -> Act:
        if request.header("webhook-id") in target:  # the answer comes after the kill
            killed.extend(terminate(dsn, "complete") + terminate(dsn, "claim"))
        return Act.answer(200)

    with HostileReceiver(script) as receiver:
        add_endpoint(dsn, receiver.url)
        warm = publish(dsn, 1)
        dispatcher = fleet.start()
        wait_until(lambda: all_delivered(dsn, 1), 20, "a first delivery (connections open)")
        target.extend(publish(dsn, 1))
        wait_until(lambda: all_delivered(dsn, 2), 20, "the delivery whose record was cut off")
        later = publish(dsn, 5)
        wait_until(lambda: all_delivered(dsn, 7), 20, "the deliveries after")
        tries = Counter(receiver.tries)
    assert killed, "no connection was terminated"
    assert tries == Counter(dict.fromkeys([*warm, *target, *later], 1))
    assert delivery_row(dsn, target[0])["attempts"] == 1
    assert dispatcher.alive()


def test_listen_connection_blackholed(dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """The LISTEN connection silently cut: delivery goes on by polling, the listener comes back."""
    pg_port = int(psycopg.conninfo.conninfo_to_dict(dsn)["port"] or 5432)
    add_endpoint(dsn, receiver.url)
    with FaultProxy(pg_port) as proxy:
        dispatcher = fleet.start(dsn=proxy.dsn(dsn), poll_interval=1.0)
        dispatcher.wait_status("/readyz", 200)
        dispatcher.wait_log("listening for notifications")  # set up: not one about to retry
        [listener] = wait_until(lambda: backends(dsn, "listener"), 10, "the listener")
        cut = listener["client_port"]
        assert proxy.blackhole(lambda link: link.upstream_port == cut) == 1
        during = publish(dsn, 3)
        wait_until(lambda: all_delivered(dsn, 3), 20, "delivery by polling meanwhile")
        wait_until(lambda: [b for b in backends(dsn, "listener") if b["client_port"] != cut],
                   60, "a new listener connection")
        dispatcher.wait_log("listener connection lost")
        after = publish(dsn, 3)
        wait_until(lambda: all_delivered(dsn, 6), 20, "delivery after the listener is back")
    assert sorted(received_ids(receiver)) == sorted([*during, *after])
    assert dispatcher.alive()


def test_network_faults_on_the_database_path(dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """A slow link to PostgreSQL, then connections reset and refused: every event sent once."""
    pg_port = int(psycopg.conninfo.conninfo_to_dict(dsn)["port"] or 5432)
    add_endpoint(dsn, receiver.url)
    with FaultProxy(pg_port) as proxy:
        proxy.latency = 0.01  # per chunk, each way
        dispatcher = fleet.start(dsn=proxy.dsn(dsn))
        dispatcher.wait_status("/readyz", 200)
        before = publish(dsn, 50)
        wait_until(lambda: all_delivered(dsn, 50), 30, "delivery over a slow link")
        proxy.refuse = True
        assert proxy.reset() >= 4  # claim, maintenance, listener, complete at least
        dispatcher.wait_status("/readyz", 503)
        during = publish(dsn, 20)  # committed while the dispatcher cannot reach the database
        proxy.heal()
        dispatcher.wait_status("/readyz", 200, timeout=30)
        wait_until(lambda: all_delivered(dsn, 70), 30, "delivery after the reconnect")
    got = Counter(received_ids(receiver))
    assert set(got) == {*before, *during}
    assert max(got.values()) == 1
    assert dispatcher.alive()


def test_no_transaction_or_lock_is_held_during_a_request(dsn: str, fleet: Fleet) -> None:
    """While requests hang, no dispatcher session is idle in a transaction or holds a lock."""
    with HostileReceiver(lambda _r, _a: Act.hang()) as receiver:
        add_endpoint(dsn, receiver.url, timeout_seconds=30.0)
        published = publish(dsn, 5)
        # A long poll keeps the claim connection idle while the requests hang.
        fleet.start(poll_interval=5.0)
        wait_until(lambda: receiver.pending() == 5, 20, "five requests hanging")
        roles = {b["application_name"] for b in backends(dsn)}
        assert {"outbox-dispatcher claim", "outbox-dispatcher maintenance",
                "outbox-dispatcher listener"} <= roles  # "complete" opens with a first result
        holds_for(lambda: not idle_holders(dsn), 2.0, "no session idle holding anything")
        assert idle_holders(dsn) == []
        with psycopg.connect(dsn) as conn:  # nobody holds the rows of the requests running
            locked = conn.execute("SELECT id FROM outbox.deliveries "
                                  "WHERE state = 'in_flight' FOR UPDATE NOWAIT").fetchall()
            conn.rollback()
        assert len(locked) == 5
        receiver.release()
        wait_until(lambda: all_delivered(dsn, 5), 20, "the requests to end")
    assert sorted(receiver.tries) == sorted(published)
    # The check sees a session that does hold a row lock in an open transaction.
    with psycopg.connect(dsn, application_name="outbox-dispatcher control") as holder:
        holder.execute("SELECT id FROM outbox.deliveries LIMIT 1 FOR UPDATE")
        assert [row[1] for row in idle_holders(dsn, settled=0)] == ["outbox-dispatcher control"]


def _publish_mixed(dsn: str, count: int, keys: int) -> tuple[list[str], dict[str, list[int]]]:
    """``count`` events, every fourth with one of ``keys`` keys; ids, and n per key in order."""
    ids: list[str] = []
    order: dict[str, list[int]] = defaultdict(list)
    with psycopg.connect(dsn) as conn:
        for start in range(0, count, 100):
            events = []
            for n in range(start, min(start + 100, count)):
                key = f"k{n % keys}" if n % 4 == 0 else None
                events.append(outbox.Event("fleet.event", {"n": n}, key=key))
                if key:
                    order[key].append(n)
            with conn.transaction():
                ids += [str(i) for i in outbox.publish_many(conn, events)]
    return ids, order


def _key_order(requests: list[Request]) -> dict[str, list[int]]:
    """Per key, the events' numbers in the order they arrived."""
    arrived: dict[str, list[int]] = defaultdict(list)
    for request in requests:
        body = json.loads(request.body)
        if body["key"]:
            arrived[body["key"]].append(body["data"]["n"])
    return arrived


def test_four_dispatchers_two_thousand_events(server: TemporaryPostgres, dsn: str,
                                              receiver: Receiver, fleet: Fleet) -> None:
    """Four dispatchers, 2,000 events: none twice, claims within size, limits held, no deadlock."""
    log = ServerLog(server)
    claims = ClaimLog(dsn)
    tracker = Tracker(delay=0.002)
    receiver.responder = tracker
    add_endpoint(dsn, receiver.url, max_in_flight=8)
    dispatchers = [fleet.start("--batch-size", "20", "--concurrency", "16") for _ in range(4)]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    published, order = _publish_mixed(dsn, 2000, keys=20)
    wait_until(lambda: all_delivered(dsn, 2000), 90, "2,000 deliveries")

    requests = receiver.snapshot()
    got = Counter(r.header("webhook-id") for r in requests)
    assert set(got) == set(published)
    assert max(got.values()) == 1, "an event was sent twice without a fault"
    sizes = claims.sizes()
    assert sizes[0] <= 20, f"a claim took {sizes[0]} rows with --batch-size 20"
    assert tracker.peak <= 8
    assert not tracker.overlaps
    assert _key_order(requests) == order, "a key's events arrived out of publish order"
    # Who did the work is no promise here: one dispatcher can fill the endpoint's
    # 8 slots, and one holding them passes them on to its own waiting claims, so
    # it may well do it all (test_fleet.py checks that a fleet shares an endpoint
    # that one dispatcher cannot fill).
    server_log = log.since()
    assert "deadlock detected" not in server_log
    assert "could not serialize" not in server_log


def test_serializable_as_the_database_default(dsn: str, fresh_db: str, receiver: Receiver,
                                              fleet: Fleet) -> None:
    """default_transaction_isolation = serializable on the database: the fleet works as usual."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{fresh_db}" SET default_transaction_isolation '
                     "= 'serializable'")
    tracker = Tracker(delay=0.005)
    receiver.responder = tracker
    add_endpoint(dsn, receiver.url, max_in_flight=4, rate_limit=200.0, breaker_failures=3)
    dispatchers = [fleet.start("--concurrency", "8") for _ in range(3)]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    published, order = _publish_mixed(dsn, 300, keys=5)
    wait_until(lambda: all_delivered(dsn, 300), 60, "300 deliveries")
    requests = receiver.snapshot()
    got = Counter(r.header("webhook-id") for r in requests)
    assert set(got) == set(published)
    assert max(got.values()) == 1
    assert tracker.peak <= 4
    assert _key_order(requests) == order
    for dispatcher in dispatchers:
        log = dispatcher.log()
        assert "could not serialize" not in log, log[-2000:]
        assert "database is not usable" not in log, log[-2000:]


def _publish_quietly(dsn: str, stop: threading.Event, sent: list[str]) -> None:
    """Another tenant's trickle: one event a transaction, ten a second, until ``stop``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(0.1):
            event = outbox.Event("quiet.event", {"n": len(sent)}, tenant="quiet")
            sent += [str(i) for i in outbox.publish_many(conn, [event])]


def test_a_flood_on_three_endpoints_deadlocks_nothing(server: TemporaryPostgres, dsn: str,
                                                     receiver: Receiver, fleet: Fleet) -> None:
    """Three dispatchers, three endpoints, a flood in large transactions: no deadlock."""
    log = ServerLog(server)
    for n in range(3):
        add_endpoint(dsn, f"{receiver.url}e{n}", name=f"sink-{n}", max_in_flight=16)
    dispatchers = [fleet.start("--concurrency", "32") for _ in range(3)]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    stop = threading.Event()
    quiet: list[str] = []
    trickle = threading.Thread(target=_publish_quietly, args=(dsn, stop, quiet))
    trickle.start()
    try:
        flood = publish(dsn, _FLOOD, per_transaction=500)
    finally:
        stop.set()
        trickle.join()
    total = 3 * (len(flood) + len(quiet))
    wait_until(lambda: all_delivered(dsn, total), 180, f"{total} deliveries")

    server_log = log.since()
    at = server_log.find("deadlock detected")
    assert at < 0, server_log[at:at + 4000]
    for dispatcher in dispatchers:
        assert "deadlock" not in dispatcher.log()
    assert Counter(received_ids(receiver)) == Counter(3 * [*flood, *quiet])
