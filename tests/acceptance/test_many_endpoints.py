"""One endpoint per customer: a dispatcher serves thousands of endpoints, each in its turn.

The invariant (docs/concepts.md, "Many endpoints"): a due pending delivery of an
enabled endpoint whose circuit is closed and whose limits have room is
claimed within a poll interval by any dispatcher with free request capacity,
however many other endpoints exist or have work.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

import outbox
from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import FAST_ENDPOINT, Dispatcher, wait_until

pytestmark = pytest.mark.slow


def add_endpoints(conn: psycopg.Connection[Any], url: str, count: int, **settings: Any,
                  ) -> None:
    """Endpoints c0 .. c{count-1}, endpoint cI subscribed to type t.I only, at ``url``cI."""
    options = {**FAST_ENDPOINT, "max_attempts": 10, **settings}
    conn.execute(
        "INSERT INTO outbox.endpoints (name, url, events, events_like, max_attempts,"
        " timeout_seconds, min_backoff_seconds, max_backoff_seconds, max_in_flight)"
        " SELECT 'c' || i, %(url)s || 'c' || i, ARRAY['t.' || i], ARRAY['t.' || i],"
        " %(max_attempts)s, %(timeout_seconds)s, %(min_backoff_seconds)s,"
        " %(max_backoff_seconds)s, %(max_in_flight)s"
        " FROM generate_series(0, %(last)s) AS i",
        {**options, "max_in_flight": options.get("max_in_flight", 16), "url": url,
         "last": count - 1})
    conn.commit()


def publish_spread(conn: psycopg.Connection[Any], endpoints: int, per_endpoint: int,
                   first: int = 0) -> None:
    """``per_endpoint`` events for each endpoint from ``first``, interleaved, committed."""
    events = [outbox.Event(f"t.{i}", {"n": n}) for n in range(per_endpoint)
              for i in range(first, endpoints)]
    for start in range(0, len(events), 5000):
        outbox.publish_many(conn, events[start:start + 5000])
    conn.commit()


def delivered(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM outbox.deliveries WHERE state = 'delivered'"
                       ).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def test_a_fast_receiver_behind_a_hundred_endpoints_is_not_starved(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """100 endpoints, a fast receiver, one dispatcher at its default poll interval: every
    event arrives within seconds (it used to take minutes for the last endpoints' turn)."""
    add_endpoints(conn, receiver.url, 100)
    publish_spread(conn, 100, 100)
    with Dispatcher(dsn, "--poll-interval", "2") as dispatcher:
        started = time.monotonic()
        wait_until(lambda: delivered(conn) == 10_000, timeout=30, dispatcher=dispatcher,
                   what="10,000 events over 100 endpoints to be delivered")
        took = time.monotonic() - started
    assert receiver.count == 10_000
    assert took < 30


def test_a_thousand_endpoints_each_get_their_turn_beside_a_deep_backlog(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """1,000 endpoints with work and --concurrency 64, beside one slow endpoint whose backlog
    could fill every slot for minutes: each endpoint is served within a bounded time."""
    def respond(request: Request) -> Response:
        return Response(delay=0.05) if request.path == "/c0" else Response()

    with Receiver(respond) as receiver:
        add_endpoints(conn, receiver.url, 1001, max_in_flight=64)
        publish_spread(conn, 1, 5000)  # c0: 5,000 events at 50 ms each: 4 s with every slot
        with Dispatcher(dsn, "--concurrency", "64", "--poll-interval", "2") as dispatcher:
            wait_until(lambda: receiver.count >= 200, timeout=30, dispatcher=dispatcher,
                       what="the deep backlog to take the slots")
            publish_spread(conn, 1001, 3, first=1)
            published = time.monotonic()
            wait_until(lambda: {r.path for r in receiver.snapshot()} >= {
                f"/c{i}" for i in range(1, 1001)}, timeout=60, dispatcher=dispatcher,
                what="every endpoint to get its turn")
            served = time.monotonic() - published
            deep = sum(1 for r in receiver.snapshot() if r.path == "/c0")
    assert served < 60
    assert deep < 5000, "the other endpoints waited for the deep backlog to drain"


def test_endpoints_that_cannot_sign_do_not_hold_up_the_others(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """Endpoints whose secret is missing here wait; the walk for due work goes past them."""
    add_endpoints(conn, receiver.url, 11)
    conn.execute("UPDATE outbox.endpoints SET secret = 'env:NOT_SET_HERE' WHERE name <> 'c10'")
    conn.commit()
    publish_spread(conn, 11, 3)
    with Dispatcher(dsn, "--concurrency", "4", "--poll-interval", "2") as dispatcher:
        wait_until(lambda: receiver.count >= 3, timeout=30, dispatcher=dispatcher,
                   what="the endpoint that can sign to get its events")
    assert {r.path for r in receiver.snapshot()} == {"/c10"}
