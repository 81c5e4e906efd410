"""A snapshot held open elsewhere (the MVCC horizon pinned) while events flow: delivery keeps up."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest

import outbox
from outbox.testing import Receiver
from tests.support.dispatcher import Dispatcher, add_endpoint, wait_until

pytestmark = pytest.mark.slow
HOLD = 15.0  # seconds the snapshot is held while events are published
RATE = 400  # events a second, one per transaction
LATE = 5.0  # seconds from publish to arrival that no event may exceed


def test_delivery_keeps_up_while_another_transaction_holds_a_snapshot(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """Events published one per transaction for 15 s while a REPEATABLE READ transaction
    holds its snapshot (no vacuum may remove what the claims leave behind): every one
    arrives, none more than 5 s after it was published (claims that scanned from the
    index's head fell behind by the second: 20 s late after 90 s at 1,000 a second), and
    the endpoint's slot rows are not written for each request (their versions pile up), and
    the claims do not read every entry the snapshot keeps in the pending index."""
    add_endpoint(conn, "steady", receiver.url)
    with Dispatcher(dsn) as dispatcher:
        dispatcher.wait_serving()
        with psycopg.connect(dsn) as pinned:
            pinned.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            pinned.execute("SELECT count(*) FROM outbox.deliveries").fetchone()
            started = time.monotonic()
            published = 0
            while (now := time.monotonic()) < started + HOLD:
                if published < (now - started) * RATE:
                    outbox.publish(conn, "t", {"at": time.time()})
                    conn.commit()
                    published += 1
                else:
                    time.sleep(0.001)
            wait_until(lambda: len(receiver.snapshot()) >= published, timeout=LATE * 4,
                       dispatcher=dispatcher, what=f"{published} events to arrive")
            pinned.rollback()
    # The dispatcher has stopped: its sessions' statistics are in.
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT n_tup_upd FROM pg_stat_user_tables "
                       "WHERE relid = 'outbox.endpoint_slots'::regclass").fetchone()
    read = conn.execute("SELECT idx_tup_read FROM pg_stat_user_indexes "
                        "WHERE indexrelid = 'outbox.deliveries_pending'::regclass").fetchone()
    conn.commit()
    assert row is not None
    assert read is not None
    late = sorted(request.received_at - json.loads(request.body)["data"]["at"]
                  for request in receiver.snapshot())
    assert len(late) == published
    assert late[-1] < LATE, (f"p50 {late[len(late) // 2]:.2f} s, "
                             f"p99 {late[len(late) * 99 // 100]:.2f} s, max {late[-1]:.2f} s")
    # A slot leased and given back per request wrote its row twice an event, and each
    # look for a free slot walked every version while the snapshot lived.
    assert row[0] < published / 3, f"{row[0]} writes of slot rows for {published} events"
    # Claims that scanned from the index's head read every entry claimed since the
    # snapshot began: 1,700 per event here (10 million in all); from the floors, 64.
    assert read[0] < 200 * published, f"{read[0]} index entries read for {published} events"
