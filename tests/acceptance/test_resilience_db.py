"""The database goes away under a running dispatcher, or is not there yet: nothing is lost.

These tests stop and start the session's PostgreSQL cluster (other tests'
databases live there too, but tests run one at a time and every test puts the
cluster back in ``finally``), or kill the dispatcher's listener backend. The
cluster is stopped with ``fast``: a clean shutdown, so that a commit the
server acknowledged survives (the test cluster runs with
``synchronous_commit=off``, and an ``immediate`` stop could lose the last
acknowledged commits for reasons that have nothing to do with the dispatcher).
"""

from __future__ import annotations

import time

import psycopg
import pytest

from outbox.testing import Receiver, TemporaryPostgres
from tests.support.faults import Producer
from tests.support.resilience import (
    DispatcherProcess,
    Fleet,
    Tracker,
    add_endpoint,
    all_delivered,
    holds_for,
    listener_pids,
    nothing_lost,
    publish,
    received_ids,
    summary,
    wait_until,
)

pytestmark = pytest.mark.slow


def test_database_restart_under_load(server: TemporaryPostgres, dsn: str, receiver: Receiver,
                                     fleet: Fleet) -> None:
    """PostgreSQL restarted under load: healthz stays 200, readyz follows, nothing is lost."""
    receiver.responder = Tracker(delay=0.01)
    add_endpoint(dsn, receiver.url, timeout_seconds=1.0)
    before = publish(dsn, 300)
    dispatcher = fleet.start("--concurrency", "8")
    producer = Producer(dsn)
    producer.start()
    try:
        receiver.wait_for(50, timeout=30)
        server.stop("fast")
        try:
            def outage_seen() -> bool:
                assert dispatcher.status("/healthz") == 200, "healthz failed during the outage"
                return dispatcher.status("/readyz") == 503
            wait_until(outage_seen, 10, "/readyz to turn 503")
            holds_for(lambda: dispatcher.status("/healthz") == 200
                      and dispatcher.status("/readyz") == 503, 2,
                      "healthz 200 and readyz 503 during the outage")
            assert producer.failures > 0
        finally:
            server.start()
        dispatcher.wait_status("/readyz", 200, timeout=30)
        assert dispatcher.status("/healthz") == 200
        assert dispatcher.alive()
        committed = len(producer.committed)
        wait_until(lambda: len(producer.committed) >= committed + 50, 20,
                   "the producer to commit again")
    finally:
        producer.stop()

    stored, got = nothing_lost(dsn, receiver, [*before, *producer.committed],
                               producer.in_doubt)
    assert dispatcher.alive()
    summary("database-restart", events=len(stored), in_doubt=len(producer.in_doubt),
            requests=len(got), duplicates=len(got) - len(set(got)))


def test_database_down_at_start(server: TemporaryPostgres, dsn: str, receiver: Receiver,
                                fleet: Fleet) -> None:
    """A dispatcher started while the database is down waits, then delivers once it is up."""
    add_endpoint(dsn, receiver.url)
    published = publish(dsn, 20)
    server.stop("fast")
    try:
        dispatcher = fleet.start()
        dispatcher.wait_status("/healthz", 200)
        assert "database" in dispatcher.get("/readyz")[1]
        # Retrying meanwhile: alive, not ready, nothing sent.
        holds_for(lambda: dispatcher.alive() and dispatcher.status("/healthz") == 200
                  and dispatcher.status("/readyz") == 503 and receiver.count == 0, 3,
                  "alive and waiting for the database")
    finally:
        server.start()
    dispatcher.wait_status("/readyz", 200, timeout=30)
    wait_until(lambda: all_delivered(dsn, 20), 30, "the events delivered after the start")
    assert set(received_ids(receiver)) == set(published)


def test_killed_listener_is_replaced(dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """A listener connection killed by the server comes back: new events still wake it."""
    add_endpoint(dsn, receiver.url)
    # Polling every 30 s: a delivery within seconds can only come from a notification.
    dispatcher: DispatcherProcess = fleet.start(poll_interval=30)
    dispatcher.wait_status("/readyz", 200)
    [old] = wait_until(lambda: listener_pids(dsn), 10, "the listener connection")

    publish(dsn, 1)
    receiver.wait_for(1, timeout=10)

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (old,))
    started = time.monotonic()
    [new] = wait_until(lambda: listener_pids(dsn) - {old}, 10, "a new listener connection")
    reconnect = time.monotonic() - started

    published = publish(dsn, 1)
    receiver.wait_for(2, timeout=10)
    assert received_ids(receiver)[1] == published[0]
    assert dispatcher.alive()
    summary("listener", old_pid=old, new_pid=new, seconds_to_reconnect=round(reconnect, 2))
