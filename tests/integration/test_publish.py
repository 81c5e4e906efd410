"""publish / publish_many against a real PostgreSQL: the event lives and dies with the caller's
transaction, fans out to the subscribed endpoints, and keeps what the producer gave."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox.testing import assert_published, published_events
from tests.support.publishing import (
    add_endpoint,
    committed,
    committed_event_ids,
    delivery_count,
    traced,
)


def test_rollback_leaves_nothing(conn: psycopg.Connection[Any], dsn: str) -> None:
    """A rolled-back publish leaves no event and no delivery behind."""
    add_endpoint(conn, "all")
    outbox.publish(conn, "mail.received", {"n": 1})
    outbox.publish_many(conn, [outbox.Event("mail.received", {"n": 2})])
    conn.rollback()
    assert committed_event_ids(dsn) == []
    assert delivery_count(dsn) == 0


def test_commit_fans_out_to_subscribed_live_endpoints(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """Committed: one pending delivery per live subscribed endpoint (disabled ones too)."""
    mail = add_endpoint(conn, "mail", ["mail.%"])
    everything = add_endpoint(conn, "everything", ["%"])
    twice = add_endpoint(conn, "twice", ["mail.%", "mail.received"])
    add_endpoint(conn, "orders", ["order.%"])
    disabled = add_endpoint(conn, "disabled", ["mail.%"], enabled=False)
    add_endpoint(conn, "removed", ["mail.%"], removed=True)

    event_id = outbox.publish(conn, "mail.received", {"message_id": 42}, key="thread-7")
    assert isinstance(event_id, uuid.UUID)
    assert event_id.version == 7
    conn.commit()

    rows = committed(dsn, "SELECT d.endpoint_id, d.state, d.attempts, d.key, d.seq = e.seq, "
                          "e.unrouted FROM outbox.deliveries d "
                          "JOIN outbox.events e ON e.id = d.event_id WHERE e.id = %s "
                          "ORDER BY d.endpoint_id", (event_id,))
    assert rows == [(endpoint, "pending", 0, "thread-7", True, False)
                    for endpoint in sorted([mail, everything, twice, disabled])]


def test_type_without_subscriber_is_stored_unrouted(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """An event no endpoint subscribes to is kept with unrouted = true and no deliveries."""
    add_endpoint(conn, "orders", ["order.%"])
    event_id = outbox.publish(conn, "audit.logged", {"who": "me"})
    conn.commit()
    assert committed(dsn, "SELECT unrouted FROM outbox.events WHERE id = %s",
                     (event_id,)) == [(True,)]
    assert delivery_count(dsn) == 0


def test_only_removed_subscribers_means_unrouted(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """A removed subscriber gets nothing: the event is unrouted; a disabled one keeps it."""
    add_endpoint(conn, "gone", ["mail.%"], removed=True)
    event_id = outbox.publish(conn, "mail.received", {})
    conn.commit()
    assert committed(dsn, "SELECT unrouted FROM outbox.events WHERE id = %s",
                     (event_id,)) == [(True,)]
    assert delivery_count(dsn) == 0
    add_endpoint(conn, "paused", ["mail.%"], enabled=False)
    kept = outbox.publish(conn, "mail.received", {})
    conn.commit()
    assert committed(dsn, "SELECT unrouted FROM outbox.events WHERE id = %s",
                     (kept,)) == [(False,)]
    assert delivery_count(dsn) == 1


def test_event_keeps_what_the_producer_gave(conn: psycopg.Connection[Any], dsn: str) -> None:
    """Type, key, headers and idempotency key are stored; the payload byte for byte."""
    add_endpoint(conn, "all")
    payload = {"text": "grüße ✓", "nested": {"list": [1, 2.5, None, True]}, "big": 10**30}
    event_id = outbox.publish(conn, "mail.received", payload, key="thread-7",
                              headers={"X-Tenant": "acme"}, idempotency_key="msg-42-rcv")
    conn.commit()
    rows = committed(dsn, "SELECT type, key, payload::text, headers, idempotency_key "
                          "FROM outbox.events WHERE id = %s", (event_id,))
    expected_text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    assert rows == [("mail.received", "thread-7", expected_text, {"x-tenant": "acme"},
                     "msg-42-rcv")]


def test_delay_postpones_the_first_attempt(conn: psycopg.Connection[Any], dsn: str) -> None:
    """next_attempt_at of the deliveries is at least `delay` after the event's created_at."""
    add_endpoint(conn, "a")
    add_endpoint(conn, "b")
    delay = timedelta(seconds=30)
    event_id = outbox.publish(conn, "mail.received", {}, delay=delay)
    now_id = outbox.publish(conn, "mail.received", {})
    conn.commit()
    rows = committed(dsn, "SELECT d.next_attempt_at - e.created_at, "
                          "e.deliver_after - e.created_at FROM outbox.deliveries d "
                          "JOIN outbox.events e ON e.id = d.event_id WHERE e.id = %s",
                     (event_id,))
    assert len(rows) == 2
    assert all(gap >= delay and after >= delay for gap, after in rows)
    undelayed = committed(dsn, "SELECT d.next_attempt_at <= clock_timestamp() "
                               "FROM outbox.deliveries d WHERE d.event_id = %s", (now_id,))
    assert undelayed == [(True,), (True,)]


def test_publish_many_ids_in_input_order_one_round_trip(
        conn: psycopg.Connection[Any], dsn: str, tmp_path: Path) -> None:
    """publish_many returns ids in input order, sends one statement, and seq follows input order."""
    add_endpoint(conn, "all")
    events = [outbox.Event("mail.received", {"n": n}, key=f"k{n % 3}") for n in range(50)]
    conn.execute("SELECT 1")  # the transaction's BEGIN goes out before the trace starts
    with traced(conn, tmp_path / "trace") as messages:
        ids = outbox.publish_many(conn, events)
    conn.commit()
    assert sum("\tSync" in m or "\tQuery" in m for m in messages) == 1, messages
    assert len(set(ids)) == 50
    assert committed_event_ids(dsn) == ids
    payloads = committed(dsn, "SELECT payload->>'n' FROM outbox.events ORDER BY seq")
    assert [int(p[0]) for p in payloads] == list(range(50))
    assert delivery_count(dsn) == 50


def test_publish_many_stores_per_event_options(conn: psycopg.Connection[Any], dsn: str) -> None:
    """Each event of a batch keeps its own key, headers and delay."""
    add_endpoint(conn, "all")
    ids = outbox.publish_many(conn, [
        outbox.Event("a.one", {"n": 1}, key="k1", headers={"x-a": "1"}),
        outbox.Event("a.two", [2], delay=timedelta(minutes=5)),
        outbox.Event("a.three", "three", key="k3", headers={"x-c": "3"},
                     delay=timedelta(seconds=1)),
    ])
    conn.commit()
    rows = committed(dsn, "SELECT e.id, e.type, e.key, e.headers, e.payload::text, "
                          "d.next_attempt_at - e.created_at FROM outbox.events e "
                          "JOIN outbox.deliveries d ON d.event_id = e.id ORDER BY e.seq")
    assert [r[0] for r in rows] == ids
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [
        ("a.one", "k1", {"x-a": "1"}, '{"n":1}'),
        ("a.two", None, {}, "[2]"),
        ("a.three", "k3", {"x-c": "3"}, '"three"'),
    ]
    gaps = [r[5] for r in rows]
    assert gaps[0] >= timedelta(0)
    assert gaps[1] >= timedelta(minutes=5)
    assert timedelta(seconds=1) <= gaps[2] < timedelta(minutes=5)


def test_publish_many_of_nothing_sends_nothing(
        conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    """An empty batch returns [] without a statement."""
    conn.execute("SELECT 1")
    with traced(conn, tmp_path / "trace") as messages:
        assert outbox.publish_many(conn, []) == []
    assert messages == []


def _notifications(listener: psycopg.Connection[Any], until_payload: str) -> list[str]:
    """Payloads received on outbox_wakeup up to (and without) the sentinel payload."""
    seen: list[str] = []
    for note in listener.notifies(timeout=10):
        if note.payload == until_payload:
            return seen
        seen.append(note.payload)
    raise AssertionError(f"no sentinel notification; got {seen}")


def test_commit_wakes_listeners_rollback_does_not(conn: psycopg.Connection[Any], dsn: str) -> None:
    """LISTEN outbox_wakeup hears a committed publish and nothing from a rolled-back one."""
    add_endpoint(conn, "all")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN outbox_wakeup")

        outbox.publish(conn, "mail.received", {})
        conn.rollback()
        # Notifications arrive in commit order: had the rollback notified,
        # it would show up before this sentinel.
        conn.execute("SELECT pg_notify('outbox_wakeup', 'sentinel-1')")
        conn.commit()
        assert _notifications(listener, "sentinel-1") == []

        outbox.publish_many(conn, [outbox.Event("mail.received", {}) for _ in range(3)])
        conn.commit()
        conn.execute("SELECT pg_notify('outbox_wakeup', 'sentinel-2')")
        conn.commit()
        assert _notifications(listener, "sentinel-2") == [""]


def test_testing_helpers_see_uncommitted_events(conn: psycopg.Connection[Any], dsn: str) -> None:
    """outbox.testing.assert_published / published_events read the caller's open transaction."""
    outbox.publish(conn, "mail.received", {"message_id": 42}, key="thread-7")
    outbox.publish(conn, "mail.sent", {"message_id": 43})
    assert_published(conn, "mail.received", {"message_id": 42}, key="thread-7")
    assert_published(conn, "mail.sent", count=1)
    assert [e["type"] for e in published_events(conn)] == ["mail.received", "mail.sent"]
    assert published_events(conn, "mail.received")[0]["payload"] == {"message_id": 42}
    with pytest.raises(AssertionError):
        assert_published(conn, "mail.received", {"message_id": 99})
    assert committed_event_ids(dsn) == []
    conn.rollback()
    assert published_events(conn) == []


def test_missing_schema_is_reported_as_such(cluster: Any, tmp_path: Path) -> None:
    """Publishing into a database that was never migrated raises SchemaMissing (an OutboxError)."""
    name = f"unmigrated_{uuid.uuid4().hex[:12]}"
    with cluster.admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with (psycopg.connect(cluster.dsn_for(name)) as bare,
              pytest.raises(outbox.SchemaMissing, match="outbox migrate")):
            outbox.publish(bare, "mail.received", {})
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
