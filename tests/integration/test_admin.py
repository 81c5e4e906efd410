"""The operator functions behind `outbox status / dead / replay / purge`, on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from outbox import admin, retention
from outbox.errors import EndpointNotFound, OutboxError
from tests.support.admin import (
    add_endpoint,
    age_event,
    count,
    deliveries,
    publish,
    set_state,
    unrouted,
)

Conn = psycopg.Connection[Any]


def test_status_counts_each_state_per_live_endpoint(conn: Conn) -> None:
    """status counts each state per live endpoint, and the unrouted events."""
    add_endpoint(conn, "mail", "mail.*")
    add_endpoint(conn, "quiet", "order.*", enabled=False)
    gone = add_endpoint(conn, "gone")
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE id = %s", (gone,))
    conn.commit()
    ids = [publish(conn) for _ in range(5)]
    publish(conn, "nobody.listens")
    publish(conn, "nobody.listens")
    set_state(conn, ids[0], "mail", "in_flight")
    set_state(conn, ids[1], "mail", "delivered")
    set_state(conn, ids[2], "mail", "dead", error="boom")
    conn.execute("UPDATE outbox.deliveries SET created_at = now() - interval '90 seconds' "
                 "WHERE event_id = %s", (ids[3],))
    conn.commit()

    result = admin.status(conn)

    assert result.unrouted == 2
    assert [e.name for e in result.endpoints] == ["mail", "quiet"]
    mail, quiet = result.endpoints
    assert (mail.pending, mail.in_flight, mail.delivered, mail.dead) == (2, 1, 1, 1)
    assert mail.enabled
    assert not quiet.enabled
    assert 90 <= mail.oldest_pending_seconds < 3600
    assert (quiet.pending, quiet.oldest_pending_seconds) == (0, 0)


def test_status_reports_unrouted_without_endpoints(conn: Conn) -> None:
    """With no endpoint at all, status still counts the unrouted events."""
    publish(conn)
    assert admin.status(conn) == admin.Status(endpoints=[], unrouted=1)


def test_status_names_the_dispatchers_serving_the_database(conn: Conn) -> None:
    """A heartbeat seen lately, or a row whose serves_until (a fleet's look at an idle
    database) has not passed, counts its process alive once and names it; others do not."""
    rows = [("web-1", 10, "5 seconds", None),  # a heartbeat
            ("web-1", 10, "50 seconds", "40 seconds"),
            ("web-2", 20, "50 seconds", "40 seconds"),
            ("web-3", 30, "50 seconds", None),  # stopped beating
            ("web-4", 40, "95 seconds", "-5 seconds")]
    for host, pid, seen_ago, serves_for in rows:
        conn.execute("INSERT INTO outbox.dispatchers (id, host, pid, version, seen_at, "
                     "serves_until) VALUES (%s, %s, %s, 'x', now() - %s::interval, "
                     "now() + %s::interval)", (uuid.uuid4(), host, pid, seen_ago, serves_for))
    conn.commit()
    result = admin.status(conn)
    assert result.dispatchers == 2
    assert result.served_by == [admin.ServedBy("web-1", 10), admin.ServedBy("web-2", 20)]
    assert str(result.served_by[0]) == "web-1 (pid 10)"


def test_dead_letters_newest_first_filtered_and_limited(conn: Conn) -> None:
    """dead_letters lists dead deliveries newest first, by endpoint, up to the limit."""
    add_endpoint(conn, "a")
    add_endpoint(conn, "b")
    first, second = publish(conn, key="k1"), publish(conn)
    set_state(conn, first, "a", "dead", error="HTTP 500", status=500, finished_ago="2 minutes")
    set_state(conn, second, "a", "dead", error="timeout", finished_ago="1 minute")
    set_state(conn, second, "b", "delivered")

    letters = admin.dead_letters(conn)
    assert [(d.event_id, d.endpoint) for d in letters] == [(str(second), "a"), (str(first), "a")]
    old = letters[1]
    assert (old.type, old.key, old.attempts, old.last_error, old.last_status) == (
        "mail.received", "k1", 3, "HTTP 500", 500)
    assert old.failed_at is not None
    assert old.failed_at.tzinfo is not None
    assert [d.event_id for d in admin.dead_letters(conn, limit=1)] == [str(second)]
    assert admin.dead_letters(conn, endpoint="b") == []
    with pytest.raises(EndpointNotFound):
        admin.dead_letters(conn, endpoint="never")


def test_dead_letters_in_keyset_pages(conn: Conn) -> None:
    """Pages of dead letters, each starting after the last of the one before, miss nothing."""
    add_endpoint(conn, "a")
    events = [publish(conn) for _ in range(5)]
    for n, event in enumerate(events):
        set_state(conn, event, "a", "dead", finished_ago=f"{n} minutes")
    conn.execute("UPDATE outbox.deliveries SET finished_at = NULL WHERE event_id = %s",
                 (events[4],))  # an earlier release's dead letter: the oldest
    conn.commit()
    pages, before = [], None
    while True:
        page = admin.dead_letters(conn, limit=2, before=before)
        if not page:
            break
        pages.append([d.event_id for d in page])
        before = page[-1].after
    assert pages == [[str(events[0]), str(events[1])], [str(events[2]), str(events[3])],
                     [str(events[4])]]


def test_dead_letters_of_a_removed_endpoint_are_listed(conn: Conn) -> None:
    """A removed endpoint's dead letters stay visible, by its name too."""
    gone = add_endpoint(conn, "gone")
    event = publish(conn)
    set_state(conn, event, "gone", "dead", error="endpoint removed")
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE id = %s", (gone,))
    conn.commit()
    (letter,) = admin.dead_letters(conn, endpoint="gone")
    assert letter.endpoint_removed
    assert letter.last_error == "endpoint removed"


def test_retry_by_event_id_resets_attempts_and_notifies(conn: Conn, dsn: str) -> None:
    """Retrying by event id makes its dead deliveries pending, fresh, and wakes dispatchers."""
    add_endpoint(conn, "a")
    add_endpoint(conn, "b")
    event, other = publish(conn), publish(conn)
    set_state(conn, event, "a", "dead", error="boom")
    set_state(conn, event, "b", "dead", error="boom")
    set_state(conn, other, "a", "dead", error="boom")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN outbox_wakeup")
        result = admin.retry_dead(conn, event_ids=[event])
        woke = list(listener.notifies(timeout=5, stop_after=1))
    assert result.retried == 2
    assert [n.channel for n in woke] == ["outbox_wakeup"]
    assert deliveries(conn, event) == [("a", "pending", 0, "boom"), ("b", "pending", 0, "boom")]
    row = conn.execute(
        "SELECT bool_and(finished_at IS NULL AND lease_token IS NULL "
        "AND next_attempt_at <= clock_timestamp()) FROM outbox.deliveries WHERE event_id = %s",
        (event,)).fetchone()
    assert row == (True,)
    assert deliveries(conn, other)[0][1] == "dead"


def test_retry_by_endpoint_and_everything(conn: Conn) -> None:
    """Retrying by endpoint touches only its dead letters; everything touches all live ones."""
    add_endpoint(conn, "a")
    add_endpoint(conn, "b")
    event = publish(conn)
    set_state(conn, event, "a", "dead")
    set_state(conn, event, "b", "dead")
    conn.execute("UPDATE outbox.endpoints SET enabled = false WHERE name = 'b'")
    conn.commit()

    assert admin.retry_dead(conn, endpoint="a") == admin.RetryResult(1, [])
    assert [d[1] for d in deliveries(conn, event)] == ["pending", "dead"]
    assert admin.retry_dead(conn, everything=True) == admin.RetryResult(1, ["b"])
    assert admin.retry_dead(conn, everything=True) == admin.RetryResult(0, [])


def test_retry_skips_removed_endpoints_and_refuses_unknown_names(conn: Conn) -> None:
    """Dead letters of removed endpoints are not retried; an unknown endpoint is an error."""
    gone = add_endpoint(conn, "gone")
    event = publish(conn)
    set_state(conn, event, "gone", "dead")
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE id = %s", (gone,))
    conn.commit()
    assert admin.retry_dead(conn, everything=True).retried == 0
    with pytest.raises(EndpointNotFound):
        admin.retry_dead(conn, endpoint="gone")
    with pytest.raises(ValueError, match="exactly one"):
        admin.retry_dead(conn, endpoint="a", everything=True)


def test_retry_and_discard_of_one_event_at_one_endpoint(conn: Conn) -> None:
    """Event ids with an endpoint choose those events' dead deliveries there, no others."""
    add_endpoint(conn, "a")
    add_endpoint(conn, "b")
    event = publish(conn)
    set_state(conn, event, "a", "dead")
    set_state(conn, event, "b", "dead")
    assert admin.retry_dead(conn, event_ids=[event], endpoint="b").retried == 1
    assert [d[1] for d in deliveries(conn, event)] == ["dead", "pending"]
    assert admin.discard_dead(conn, event_ids=[event], endpoint="b") == 0
    assert admin.discard_dead(conn, event_ids=[event], endpoint="a") == 1
    assert [d[1] for d in deliveries(conn, event)] == ["pending"]


def test_replay_of_a_delivered_event_adds_a_delivery(conn: Conn) -> None:
    """Replaying a delivered event gives its endpoint a new pending delivery; the old stays."""
    add_endpoint(conn, "a")
    event = publish(conn, key="k")
    set_state(conn, event, "a", "delivered")
    result = admin.replay(conn, "a", event_ids=[event])
    assert (result.replayed, result.skipped, result.endpoint_enabled) == (1, 0, True)
    assert [d[1] for d in deliveries(conn, event)] == ["delivered", "pending"]
    row = conn.execute("SELECT count(*) FROM outbox.deliveries d JOIN outbox.events e "
                       "ON e.id = d.event_id AND e.seq = d.seq AND e.key = d.key").fetchone()
    assert row == (2,)


def test_replay_routes_an_unrouted_event_whatever_its_type(conn: Conn) -> None:
    """An unrouted event replayed to an endpoint not subscribed to it is delivered and routed."""
    add_endpoint(conn, "orders", "order.*", enabled=False)
    event = publish(conn, "mail.received")
    assert unrouted(conn, event)
    result = admin.replay(conn, "orders", event_ids=[event])
    assert (result.replayed, result.rerouted, result.endpoint_enabled) == (1, 1, False)
    assert deliveries(conn, event) == [("orders", "pending", 0, None)]
    assert not unrouted(conn, event)


def test_replay_skips_events_already_pending_there(conn: Conn) -> None:
    """An event already pending or in flight for the endpoint is not queued twice."""
    add_endpoint(conn, "a")
    pending, flying, done = publish(conn), publish(conn), publish(conn)
    set_state(conn, flying, "a", "in_flight")
    set_state(conn, done, "a", "dead")
    result = admin.replay(conn, "a", event_ids=[pending, flying, done])
    assert (result.replayed, result.skipped) == (1, 2)
    assert len(deliveries(conn, pending)) == 1
    assert [d[1] for d in deliveries(conn, done)] == ["dead", "pending"]


def test_replay_since_a_duration_or_a_timestamp(conn: Conn) -> None:
    """--since picks the events created at or after the time, by duration ago or timestamp."""
    add_endpoint(conn, "a", "nothing.*")
    old = age_event(conn, publish(conn), days=2)
    recent = publish(conn)
    assert admin.replay(conn, "a", since=timedelta(hours=1)).replayed == 1
    assert deliveries(conn, old) == []
    assert [d[1] for d in deliveries(conn, recent)] == ["pending"]
    naive = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=3)
    result = admin.replay(conn, "a", since=naive)
    assert (result.replayed, result.skipped) == (1, 1)
    assert len(deliveries(conn, old)) == 1


def test_replay_of_unknown_events_changes_nothing(conn: Conn) -> None:
    """An event id the database does not hold aborts the whole replay."""
    add_endpoint(conn, "a", "none")
    event = publish(conn)
    with pytest.raises(admin.EventsNotFound):
        admin.replay(conn, "a", event_ids=[event, uuid.uuid4()])
    assert deliveries(conn, event) == []
    assert unrouted(conn, event)


def test_replay_needs_a_live_endpoint(conn: Conn) -> None:
    """Replaying to an unknown or removed endpoint is refused."""
    gone = add_endpoint(conn, "gone")
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE id = %s", (gone,))
    conn.commit()
    event = publish(conn)
    for name in ("gone", "never"):
        with pytest.raises(EndpointNotFound):
            admin.replay(conn, name, event_ids=[event])


def _purge_scene(conn: Conn) -> dict[str, uuid.UUID]:
    """Old and recent events in every state, for the purge tests."""
    add_endpoint(conn, "a", "mail.*")
    scene = {name: publish(conn) for name in
             ("old_delivered", "old_pending", "old_dead", "old_in_flight", "recent_delivered")}
    scene["old_unrouted"] = publish(conn, "nobody.listens")
    scene["recent_unrouted"] = publish(conn, "nobody.listens")
    set_state(conn, scene["old_delivered"], "a", "delivered", finished_ago="10 days")
    set_state(conn, scene["old_dead"], "a", "dead", finished_ago="10 days")
    set_state(conn, scene["old_in_flight"], "a", "in_flight")
    set_state(conn, scene["recent_delivered"], "a", "delivered")
    for name in list(scene):
        if name.startswith("old_"):
            scene[name] = age_event(conn, scene[name], days=10)
    return scene


def _event_exists(conn: Conn, event_id: uuid.UUID) -> bool:
    row = conn.execute("SELECT count(*) FROM outbox.events WHERE id = %s", (event_id,)).fetchone()
    conn.commit()
    return row == (1,)


def test_purge_removes_old_delivered_and_unrouted_and_keeps_the_rest(conn: Conn) -> None:
    """purge deletes old delivered deliveries and old events with none left, nothing else."""
    scene = _purge_scene(conn)
    assert retention.purge(conn, timedelta(days=7), batch_size=1) == retention.PurgeResult(1, 2)
    gone = {"old_delivered", "old_unrouted"}
    for name, event in scene.items():
        assert _event_exists(conn, event) == (name not in gone), name
    assert [d[1] for d in deliveries(conn, scene["old_dead"])] == ["dead"]
    assert [d[1] for d in deliveries(conn, scene["old_pending"])] == ["pending"]
    assert count(conn, "deliveries") == 4
    assert retention.purge(conn, timedelta(days=7)) == retention.PurgeResult(0, 0)


def test_purge_keeps_an_event_whose_producer_clock_ran_ahead(conn: Conn) -> None:
    """An old id is not enough: created_at (database clock) must be old too."""
    add_endpoint(conn, "a", "none")
    event = age_event(conn, publish(conn), days=10)
    conn.execute("UPDATE outbox.events SET created_at = now() WHERE id = %s", (event,))
    conn.commit()
    assert retention.purge(conn, timedelta(days=7)).events == 0
    assert _event_exists(conn, event)


def test_purge_refuses_to_run_inside_a_transaction(conn: Conn) -> None:
    """Batches must commit one by one, so a caller's open transaction is refused."""
    conn.execute("SELECT 1")
    with pytest.raises(OutboxError, match="outside a transaction"):
        retention.purge(conn, timedelta(days=7))


def test_apurge_does_the_same_on_an_async_connection(conn: Conn, dsn: str) -> None:
    """The async shell runs the same plan as the sync one."""
    scene = _purge_scene(conn)

    async def main() -> retention.PurgeResult:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            return await retention.apurge(aconn, timedelta(days=7), batch_size=2)

    assert asyncio.run(main()) == retention.PurgeResult(1, 2)
    assert not _event_exists(conn, scene["old_unrouted"])
    assert _event_exists(conn, scene["recent_unrouted"])
