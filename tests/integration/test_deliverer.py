"""The deliverer on its own: one real request, the decision, and records handed to the writer."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psycopg

import outbox
from dispatcher.completer import Completer
from dispatcher.db import Database, Health
from dispatcher.deliver import Deliverer
from dispatcher.http.sender import HttpSender
from dispatcher.leases import Leases
from dispatcher.observe.metrics import Metrics
from dispatcher.policy.model import ClaimRow, Endpoint
from outbox.testing import Receiver, Response
from tests.support.claiming import claim
from tests.support.dispatcher import add_endpoint


def run(dsn: str, conn: psycopg.Connection[Any], url: str, events: int = 1, *,
        metrics: Metrics | None = None, timeout: float = 10.0, **endpoint: Any,
        ) -> tuple[Deliverer, bool, int]:
    """``events`` claimed by hand and sent by a Deliverer in one request (a batch if the
    endpoint's ``max_batch`` says so); it, its verdict and the wakes."""
    endpoint_id = add_endpoint(conn, "e", url, **endpoint)
    for n in range(events):
        outbox.publish(conn, "t", {"n": n})
    conn.commit()
    rows = [ClaimRow._make(raw)
            for raw in claim(conn, [endpoint_id], rows=events, requests=1)]
    assert len(rows) == events
    wakes: list[int] = []

    async def scenario() -> tuple[Deliverer, bool]:
        completer = Completer(Database(dsn, Health(), "complete"), Leases(30, lambda: 0.0),
                              lambda: None, asyncio.Event())
        writing = asyncio.create_task(completer.run())
        sender = HttpSender(4, False, (), "outbox-test/1")
        deliverer = Deliverer(sender, completer, metrics or Metrics(),
                              lambda: wakes.append(1))
        target = Endpoint(id=endpoint_id, name="e", url=url, min_backoff=0.05,
                          max_backoff=0.1, max_attempts=5, timeout=timeout,
                          max_batch=endpoint.get("max_batch", 1),
                          breaker_failures=endpoint.get("breaker_failures", 10))
        try:
            answered = await deliverer(target, [row.delivery(0.0) for row in rows])
            await asyncio.sleep(0.3)  # the retry's wake, and the writer's batch
        finally:
            completer.close()
            await writing
            await sender.aclose()
        return deliverer, answered

    deliverer, answered = asyncio.run(scenario())
    return deliverer, answered, len(wakes)


def test_a_success_is_recorded_delivered(dsn: str, conn: psycopg.Connection[Any],
                                         receiver: Receiver) -> None:
    """2xx: delivered, counted, the endpoint answered; no retry is scheduled."""
    deliverer, answered, wakes = run(dsn, conn, receiver.url)
    assert (deliverer.delivered, deliverer.retried, answered, wakes) == (1, 0, True, 0)
    assert conn.execute("SELECT state FROM outbox.deliveries").fetchone() == ("delivered",)


def test_a_503_schedules_its_retry_and_tells_the_breaker(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """5xx: pending again with its backoff, a wake-up when it comes due, a failed verdict."""
    receiver.responder = lambda _: Response(503)
    deliverer, answered, wakes = run(dsn, conn, receiver.url)
    assert (deliverer.retried, answered, wakes) == (1, False, 1)
    row = conn.execute("SELECT state, last_status FROM outbox.deliveries").fetchone()
    assert row == ("pending", 503)


def test_a_410_dead_letters_and_pauses_the_endpoint_through_the_writer(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """410 Gone: dead at once and the endpoint paused, both written by the completer."""
    receiver.responder = lambda _: Response(410)
    deliverer, answered, _ = run(dsn, conn, receiver.url)
    assert (deliverer.dead_lettered, answered) == (1, True)
    assert conn.execute("SELECT state FROM outbox.deliveries").fetchone() == ("dead",)
    enabled, reason = conn.execute(
        "SELECT enabled, disabled_reason FROM outbox.endpoints").fetchone() or (None, None)
    assert enabled is False
    assert reason.startswith("410 Gone at ")


def test_a_batch_refused_with_413_is_split_down_to_what_passes(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """A batch answered 413 goes again in halves, halved again while refused: every event
    delivered on its first attempt, nothing recorded of the refused requests."""
    receiver.responder = lambda request: Response(
        413 if len(json.loads(request.body)) > 2 else 200)
    deliverer, answered, wakes = run(dsn, conn, receiver.url, events=7, max_batch=7)
    sizes = [len(json.loads(r.body)) for r in receiver.snapshot()]
    assert sizes == [7, 4, 2, 2, 3, 2, 1]
    assert (deliverer.delivered, deliverer.dead_lettered, answered, wakes) == (7, 0, True, 0)
    assert conn.execute("SELECT state, attempts, count(*) FROM outbox.deliveries "
                        "GROUP BY 1, 2").fetchall() == [("delivered", 1, 7)]
    assert conn.execute("SELECT count(*) FROM outbox.attempts").fetchone() == (0,)


def test_a_single_event_refused_with_413_is_dead(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """413 of a batch of one: permanent, as any other 4xx."""
    receiver.responder = lambda _: Response(413, body=b"too large")
    deliverer, answered, _ = run(dsn, conn, receiver.url, events=1, max_batch=7)
    assert (deliverer.dead_lettered, answered, receiver.count) == (1, True, 1)
    assert conn.execute("SELECT state, last_status, last_error FROM outbox.deliveries"
                        ).fetchone() == ("dead", 413, "HTTP 413 Content Too Large: too large")


def _window(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = conn.execute("SELECT circuit, outbox.circuit_sum_v2(window_failures) "
                       "FROM outbox.endpoint_state").fetchone()
    conn.commit()
    assert row is not None
    return tuple(row)


def test_a_timeout_counts_for_the_breaker_unless_the_loop_was_starved(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """A timeout opens a one-failure breaker; the same timeout while the event loop lost
    more than a quarter of the timeout is retried as any failure but the breaker is not told."""
    async def slow(_: Any) -> Response:
        await asyncio.sleep(2.0)
        return Response(200)

    receiver.responder = slow
    starved = Metrics()
    # The loop's timer is not running here: one sample after the request started, as the
    # timer would take it after the loop stood still for 10 s.
    starved.loop_lag.record(10.0, at=time.monotonic() + 3600)
    deliverer, answered, _ = run(dsn, conn, receiver.url, metrics=starved, timeout=0.3,
                                 breaker_failures=1)
    assert (deliverer.retried, answered) == (1, False)
    assert conn.execute("SELECT state, last_error LIKE '%%timeout%%' FROM outbox.deliveries"
                        ).fetchone() == ("pending", True)
    assert _window(conn) == ("closed", 0)
    conn.execute("TRUNCATE outbox.endpoints, outbox.endpoint_state, outbox.events, "
                 "outbox.deliveries CASCADE")
    conn.commit()
    run(dsn, conn, receiver.url, timeout=0.3, breaker_failures=1)
    assert _window(conn) == ("open", 1)
