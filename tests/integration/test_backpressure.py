"""--max-pending: publish() refuses past an endpoint's bound, writes nothing, and the
caller's transaction goes on; the count follows every statement that adds or finishes
deliveries."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

import outbox
from outbox import admin
from outbox.testing import Receiver
from tests.support.claiming import claim, finish
from tests.support.dispatcher import add_endpoint as dispatcher_endpoint
from tests.support.dispatcher import run_once
from tests.support.publishing import add_endpoint, committed

Conn = psycopg.Connection[Any]


def _bound(conn: Conn, name: str, bound: int | None) -> None:
    conn.execute("UPDATE outbox.endpoints SET max_pending = %s WHERE name = %s", (bound, name))
    conn.commit()


def _counted(dsn: str, endpoint_id: int) -> int:
    rows = committed(dsn, "SELECT coalesce(sum(undelivered), 0) FROM outbox.endpoint_backlog "
                          "WHERE endpoint_id = %s", (endpoint_id,))
    return int(rows[0][0])


def _events(dsn: str) -> int:
    return int(committed(dsn, "SELECT count(*) FROM outbox.events")[0][0])


def _fill(conn: Conn, count: int, type_: str = "order.created") -> None:
    outbox.publish_many(conn, [outbox.Event(type_, {"n": i}) for i in range(count)])
    conn.commit()


def test_at_the_bound_publish_raises_and_the_business_change_still_commits(
        conn: Conn, dsn: str) -> None:
    """The next publish raises BacklogFull naming the endpoint; the same transaction commits."""
    add_endpoint(conn, "orders")
    _bound(conn, "orders", 3)
    _fill(conn, 3)
    conn.execute("CREATE TABLE business (n int)")
    conn.commit()
    conn.execute("INSERT INTO business VALUES (1)")
    with pytest.raises(outbox.BacklogFull) as info:
        outbox.publish(conn, "order.created", {"n": 4}, key="k")
    assert (info.value.endpoint, info.value.bound, info.value.backlog) == ("orders", 3, 3)
    assert isinstance(info.value, outbox.OutboxError)
    conn.execute("INSERT INTO business VALUES (2)")  # the transaction is usable
    conn.commit()
    assert committed(dsn, "SELECT n FROM business ORDER BY n") == [(1,), (2,)]
    assert _events(dsn) == 3


def test_a_drained_backlog_accepts_again(conn: Conn, dsn: str) -> None:
    """Deliveries that finish leave the count; publish works again below the bound."""
    endpoint_id = add_endpoint(conn, "orders")
    _bound(conn, "orders", 2)
    _fill(conn, 2)
    with pytest.raises(outbox.BacklogFull):
        outbox.publish(conn, "order.created", {})
    conn.rollback()
    rows = claim(conn, [endpoint_id], rows=10)
    assert _counted(dsn, endpoint_id) == 2  # in flight still counts
    finish(conn, rows[0])
    finish(conn, rows[1], "dead")
    assert _counted(dsn, endpoint_id) == 0
    outbox.publish(conn, "order.created", {})
    conn.commit()
    assert _counted(dsn, endpoint_id) == 1


def test_fan_out_to_a_bounded_and_an_unbounded_endpoint(conn: Conn, dsn: str) -> None:
    """A full bounded subscriber refuses the whole event; events for others still go."""
    add_endpoint(conn, "bounded", ["order.%"])
    free = add_endpoint(conn, "free", ["%"])
    _bound(conn, "bounded", 1)
    _fill(conn, 1)
    with pytest.raises(outbox.BacklogFull, match="bounded"):
        outbox.publish(conn, "order.created", {})
    outbox.publish(conn, "mail.received", {})  # routed to the unbounded endpoint only
    conn.commit()
    assert _events(dsn) == 2
    assert committed(dsn, "SELECT count(*) FROM outbox.deliveries WHERE endpoint_id = %s",
                     (free,)) == [(2,)]


def test_publish_many_is_all_or_nothing(conn: Conn, dsn: str) -> None:
    """A batch that would pass the bound writes none of its events."""
    endpoint_id = add_endpoint(conn, "orders")
    _bound(conn, "orders", 10)
    _fill(conn, 8)
    with pytest.raises(outbox.BacklogFull):
        outbox.publish_many(conn, [outbox.Event("order.created", {"n": i}) for i in range(3)])
    conn.commit()
    assert _events(dsn) == 8
    assert _counted(dsn, endpoint_id) == 8
    _fill(conn, 2)  # exactly to the bound
    assert _counted(dsn, endpoint_id) == 10


def test_apublish_raises_too(conn: Conn, dsn: str) -> None:
    """The async shell refuses the same way."""
    add_endpoint(conn, "orders")
    _bound(conn, "orders", 1)
    _fill(conn, 1)

    async def publish_one() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            await outbox.apublish(aconn, "order.created", {})

    with pytest.raises(outbox.BacklogFull):
        asyncio.run(publish_one())


def test_concurrent_publishers_pass_the_bound_by_at_most_their_number(
        conn: Conn, dsn: str) -> None:
    """Five transactions publishing at once near the bound: at most five over, then refusals."""
    endpoint_id = add_endpoint(conn, "orders")
    _bound(conn, "orders", 10)
    _fill(conn, 9)
    published = threading.Barrier(5)
    outcomes: list[str] = []
    lock = threading.Lock()

    def publisher() -> None:
        with psycopg.connect(dsn) as mine:
            try:
                outbox.publish(mine, "order.created", {})
                outcome = "published"
            except outbox.BacklogFull:
                outcome = "refused"
            published.wait(10)  # every transaction has checked before any commits
            mine.commit()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=publisher) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes.count("published") >= 1
    assert 10 <= _counted(dsn, endpoint_id) <= 10 + 5 - 1
    with pytest.raises(outbox.BacklogFull):
        outbox.publish(conn, "order.created", {})


def test_setting_a_bound_counts_the_backlog_and_unsetting_it_forgets(
        conn: Conn, dsn: str) -> None:
    """A bound set on an endpoint with a backlog counts it at once; removed, no counters."""
    endpoint_id = add_endpoint(conn, "orders")
    _fill(conn, 4)
    _bound(conn, "orders", 4)
    assert _counted(dsn, endpoint_id) == 4
    with pytest.raises(outbox.BacklogFull):
        outbox.publish(conn, "order.created", {})
    conn.rollback()
    _bound(conn, "orders", 6)  # a changed bound keeps the count
    assert _counted(dsn, endpoint_id) == 4
    _bound(conn, "orders", None)
    assert committed(dsn, "SELECT count(*) FROM outbox.endpoint_backlog") == [(0,)]
    _fill(conn, 100)  # no bound: anything goes


def test_retry_and_replay_count_against_the_bound(conn: Conn, dsn: str) -> None:
    """Dead letters retried and events replayed are undelivered again: they count."""
    endpoint_id = add_endpoint(conn, "orders")
    _bound(conn, "orders", 5)
    _fill(conn, 2)
    for row in claim(conn, [endpoint_id], rows=10):
        finish(conn, row, "dead")
    assert _counted(dsn, endpoint_id) == 0
    admin.retry_dead(conn, endpoint="orders")
    assert _counted(dsn, endpoint_id) == 2
    ids = [r[0] for r in committed(dsn, "SELECT id FROM outbox.events")]
    for row in claim(conn, [endpoint_id], rows=10):
        finish(conn, row)
    admin.replay(conn, "orders", event_ids=ids)
    assert _counted(dsn, endpoint_id) == 2


def test_status_shows_the_bound(conn: Conn) -> None:
    """status reports max_pending (None for an unbounded endpoint)."""
    add_endpoint(conn, "orders")
    add_endpoint(conn, "free")
    _bound(conn, "orders", 7)
    found = {e.name: e.max_pending for e in admin.status(conn).endpoints}
    assert found == {"orders": 7, "free": None}


def test_the_dispatcher_drains_a_full_endpoint_and_publishing_resumes(
        conn: Conn, dsn: str, receiver: Receiver) -> None:
    """Full, refused; the real dispatcher delivers the backlog; the count is back at zero."""
    endpoint_id = dispatcher_endpoint(conn, "orders", receiver.url, max_pending=5)
    _fill(conn, 5)
    with pytest.raises(outbox.BacklogFull):
        outbox.publish(conn, "order.created", {})
    conn.rollback()
    code, log = run_once(dsn)
    assert code == 0, log
    assert len(receiver.snapshot()) == 5
    assert _counted(dsn, endpoint_id) == 0
    outbox.publish(conn, "order.created", {})
    conn.commit()
