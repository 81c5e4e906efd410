"""Ordering, concurrency and rate limits, disabled and unrouted events, the network guard.

The receiver's responders here are coroutines run in its own event loop: they
count the requests being answered at each moment, so an overlap the
dispatcher should have prevented shows up in the counts. The checks are on
what was recorded (order, peaks, spans), never on how fast things went.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

import psycopg

import outbox
from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    delivery,
    outbox_cli,
    publish,
    run_once,
    set_enabled,
    wait_all_finished,
    wait_for_state,
)


def test_per_key_order_holds_under_retries(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """30 events on 3 keys, ~30 % answered 503: each key arrives in publish order, one at a time."""
    chance = random.Random(20240501)
    in_flight: Counter[str] = Counter()
    overlaps: list[str] = []
    delivered: dict[str, list[int]] = {}

    async def respond(request: Request) -> Response:
        body = json.loads(request.body)
        key = body["key"]
        in_flight[key] += 1
        if in_flight[key] > 1:
            overlaps.append(key)
        try:
            await asyncio.sleep(0.02)  # long enough for an overlap to be seen
            if chance.random() < 0.3:
                return Response(503)
            numbers = delivered.setdefault(key, [])
            if body["data"]["n"] not in numbers:  # the first successful arrival counts
                numbers.append(body["data"]["n"])
            return Response(200)
        finally:
            in_flight[key] -= 1

    receiver.responder = respond
    add_endpoint(conn, "ordered", receiver.url, max_attempts=30)
    for n in range(30):
        outbox.publish(conn, "order.updated", {"n": n}, key=f"order-{n % 3}")
    conn.commit()
    with Dispatcher(dsn) as dispatcher:
        finished = wait_all_finished(conn, 30, dispatcher=dispatcher)
        assert dispatcher.stop() == 0
    assert finished == {"delivered": 30}
    assert overlaps == []
    assert delivered == {f"order-{k}": list(range(k, 30, 3)) for k in range(3)}
    assert len(receiver.snapshot()) > 30  # some requests did fail and were retried


def test_max_in_flight_caps_concurrent_requests(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """max_in_flight=2: the receiver never answers more than 2 requests at the same time."""
    now = 0
    peak = 0

    async def respond(_: Request) -> Response:
        nonlocal now, peak
        now += 1
        peak = max(peak, now)
        try:
            await asyncio.sleep(0.2)
            return Response(200)
        finally:
            now -= 1

    receiver.responder = respond
    add_endpoint(conn, "narrow", receiver.url, max_in_flight=2)
    for n in range(20):
        outbox.publish(conn, "order.created", {"n": n})
    conn.commit()
    code, log = run_once(dsn)
    assert code == 0, log
    assert len(receiver.snapshot()) == 20
    assert peak == 2


def test_rate_limit_spreads_requests_over_time(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """rate_limit 10/s: 20 events take ~2 s to arrive, and no one second holds more than 10."""
    add_endpoint(conn, "slow-down", receiver.url, rate_limit=10)
    for n in range(20):
        outbox.publish(conn, "order.created", {"n": n})
    conn.commit()
    code, log = run_once(dsn)
    assert code == 0, log
    arrivals = sorted(r.received_at for r in receiver.snapshot())
    assert len(arrivals) == 20
    assert arrivals[-1] - arrivals[0] >= 1.5
    busiest = max(sum(1 for t in arrivals if start <= t < start + 1.0) for start in arrivals)
    assert busiest <= 10, f"{busiest} requests within one second at a limit of 10/s"


def test_disable_is_a_pause_that_keeps_what_is_published_meanwhile(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """Disabled: nothing is sent, events published meanwhile wait for it; enabled: all arrive."""
    add_endpoint(conn, "control", receiver.url + "control")
    add_endpoint(conn, "paused", receiver.url + "paused")
    before = publish(conn, "order.created", {"n": 1})  # fanned out to both
    set_enabled(conn, "paused", False)
    with Dispatcher(dsn) as dispatcher:
        wait_for_state(conn, before, "delivered", endpoint="control", dispatcher=dispatcher)
        during = publish(conn, "order.created", {"n": 2})  # kept for the paused endpoint too
        wait_for_state(conn, during, "delivered", endpoint="control", dispatcher=dispatcher)
        assert delivery(conn, before, "paused")["state"] == "pending"
        assert delivery(conn, during, "paused")["state"] == "pending"
        status = json.loads(outbox_cli(dsn, "status", "--json").stdout)
        paused = next(e for e in status["endpoints"] if e["name"] == "paused")
        assert (paused["pending"], paused["enabled"]) == (2, False)
        assert all(r.path == "/control" for r in receiver.snapshot())

        assert outbox_cli(dsn, "endpoints", "enable", "paused").returncode == 0
        receiver.wait_for(4, timeout=20)
        assert dispatcher.stop() == 0
    arrived = [r.header("webhook-id") for r in receiver.snapshot() if r.path == "/paused"]
    assert sorted(arrived) == sorted([str(before), str(during)])


def test_410_gone_pauses_the_endpoint_and_enable_resumes_it(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """410 disables the endpoint; what is published after waits, and arrives after enable."""
    gone = True

    def respond(_: Request) -> Response:
        return Response(410 if gone else 200)

    receiver.responder = respond
    add_endpoint(conn, "moving", receiver.url)
    first = publish(conn, "order.created", {"n": 1})
    with Dispatcher(dsn) as dispatcher:
        wait_for_state(conn, first, "dead", dispatcher=dispatcher)
        row = conn.execute("SELECT enabled FROM outbox.endpoints WHERE name = 'moving'").fetchone()
        conn.commit()
        assert row == (False,)
        later = publish(conn, "order.created", {"n": 2})
        assert delivery(conn, later)["state"] == "pending"
        gone = False
        assert outbox_cli(dsn, "endpoints", "enable", "moving").returncode == 0
        wait_for_state(conn, later, "delivered", dispatcher=dispatcher)
    assert [r.header("webhook-id") for r in receiver.snapshot()] == [str(first), str(later)]


def test_unrouted_event_is_delivered_only_after_replay(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """An event no endpoint subscribes to goes nowhere; `outbox replay` delivers it."""
    add_endpoint(conn, "orders", receiver.url, events=("order.*",))
    event_id = publish(conn, "mail.received", {"message": 42})
    row = conn.execute("SELECT unrouted, (SELECT count(*) FROM outbox.deliveries) "
                       "FROM outbox.events WHERE id = %s", (event_id,)).fetchone()
    conn.commit()
    assert row == (True, 0)
    code, log = run_once(dsn)
    assert code == 0, log
    assert receiver.snapshot() == []

    replayed = outbox_cli(dsn, "replay", "--endpoint", "orders", "--event-id", str(event_id))
    assert replayed.returncode == 0, replayed.stderr
    code, log = run_once(dsn)
    assert code == 0, log
    [request] = receiver.snapshot()
    assert request.header("webhook-id") == str(event_id)
    assert delivery(conn, event_id)["state"] == "delivered"


def test_block_private_networks_refuses_loopback_unless_allowed(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """--block-private-networks dead-letters a loopback delivery; --allow-network exempts it."""
    add_endpoint(conn, "local", receiver.url)
    refused = publish(conn, "order.created", {"n": 1})
    code, log = run_once(dsn, "--block-private-networks")
    assert code == 1, log
    row = delivery(conn, refused)
    assert (row["state"], row["attempts"], row["last_status"]) == ("dead", 1, None)
    assert "private-network guard" in row["last_error"]
    assert "127.0.0.1" in row["last_error"]
    assert receiver.snapshot() == []

    allowed = publish(conn, "order.created", {"n": 2})
    code, log = run_once(dsn, "--block-private-networks", "--allow-network", "127.0.0.1/32")
    assert code == 0, log
    assert delivery(conn, allowed)["state"] == "delivered"
    [request] = receiver.snapshot()
    assert request.header("webhook-id") == str(allowed)
