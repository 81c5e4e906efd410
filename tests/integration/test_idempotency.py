"""idempotency_key: publishing the same key again returns the first event's id and adds nothing,
within one transaction, one batch, and across concurrent transactions."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg

import outbox
from tests.support.publishing import (
    add_endpoint,
    committed,
    committed_event_ids,
    delivery_count,
    wait_until_blocked,
)


def test_same_key_again_returns_first_id(conn: psycopg.Connection[Any], dsn: str) -> None:
    """A committed key published again (other payload, other type) returns the first id."""
    add_endpoint(conn, "all")
    first = outbox.publish(conn, "mail.received", {"n": 1}, idempotency_key="msg-42")
    conn.commit()
    again = outbox.publish(conn, "mail.other", {"n": 2}, idempotency_key="msg-42")
    conn.commit()
    assert again == first
    assert committed_event_ids(dsn) == [first]
    assert delivery_count(dsn) == 1
    assert committed(dsn, "SELECT payload->>'n' FROM outbox.events") == [("1",)]


def test_same_key_twice_in_one_transaction(conn: psycopg.Connection[Any], dsn: str) -> None:
    """Within one open transaction the second publish of a key sees the first."""
    add_endpoint(conn, "all")
    first = outbox.publish(conn, "mail.received", {}, idempotency_key="k")
    assert outbox.publish(conn, "mail.received", {}, idempotency_key="k") == first
    conn.commit()
    assert committed_event_ids(dsn) == [first]
    assert delivery_count(dsn) == 1


def test_same_key_inside_one_batch(conn: psycopg.Connection[Any], dsn: str) -> None:
    """In one publish_many batch, a repeated key gets the id of its first occurrence."""
    add_endpoint(conn, "all")
    stored = outbox.publish(conn, "mail.received", {}, idempotency_key="old")
    conn.commit()
    ids = outbox.publish_many(conn, [
        outbox.Event("mail.received", {"n": 0}, idempotency_key="k"),
        outbox.Event("mail.received", {"n": 1}),
        outbox.Event("mail.received", {"n": 2}, idempotency_key="k"),
        outbox.Event("mail.received", {"n": 3}, idempotency_key="old"),
        outbox.Event("mail.received", {"n": 4}),
    ])
    conn.commit()
    assert ids[2] == ids[0]
    assert ids[3] == stored
    assert len({ids[0], ids[1], ids[4], stored}) == 4
    assert committed_event_ids(dsn) == [stored, ids[0], ids[1], ids[4]]
    assert delivery_count(dsn) == 4


def test_rolled_back_key_can_be_used_again(conn: psycopg.Connection[Any], dsn: str) -> None:
    """A key whose event was rolled back is free: the next publish stores a new event."""
    rolled = outbox.publish(conn, "mail.received", {}, idempotency_key="k")
    conn.rollback()
    kept = outbox.publish(conn, "mail.received", {}, idempotency_key="k")
    conn.commit()
    assert kept != rolled
    assert committed_event_ids(dsn) == [kept]


def _race(dsn: str, first_ends: str) -> tuple[uuid.UUID, uuid.UUID]:
    """Publish key "k" in two transactions; the second blocks until the first commits or rolls
    back. Returns (first id, second id)."""
    results: dict[str, Any] = {}
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        first_id = outbox.publish(first, "mail.received", {"by": "first"}, idempotency_key="k")

        def publish_second() -> None:
            try:
                results["id"] = outbox.publish(second, "mail.received", {"by": "second"},
                                               idempotency_key="k")
                second.commit()
            except BaseException as exc:  # handed to the test thread
                results["error"] = exc

        thread = threading.Thread(target=publish_second)
        thread.start()
        try:
            wait_until_blocked(dsn, second.info.backend_pid)
            if first_ends == "commit":
                first.commit()
            else:
                first.rollback()
        finally:
            thread.join(timeout=30)
        assert not thread.is_alive()
        if "error" in results:
            raise results["error"]
    return first_id, results["id"]


def test_concurrent_same_key_one_event_both_get_its_id(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """Two concurrent transactions with one key: one event, and both callers get its id."""
    add_endpoint(conn, "all")
    first_id, second_id = _race(dsn, "commit")
    assert second_id == first_id
    assert committed_event_ids(dsn) == [first_id]
    assert delivery_count(dsn) == 1


def test_concurrent_same_key_first_rolls_back(conn: psycopg.Connection[Any], dsn: str) -> None:
    """If the first transaction rolls back, the waiting second one stores its own event."""
    add_endpoint(conn, "all")
    first_id, second_id = _race(dsn, "rollback")
    assert second_id != first_id
    assert committed_event_ids(dsn) == [second_id]
    assert committed(dsn, "SELECT payload->>'by' FROM outbox.events") == [("second",)]
    assert delivery_count(dsn) == 1
