"""outbox.testing.assert_published keeps its word: only what the current transaction published."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import outbox
from outbox.testing import assert_published, published_events
from tests.support.connections import KINDS, Handle

SYNC_KINDS = [k for k in KINDS if "async" not in k.__name__]


def commit_elsewhere(dsn: str, type_: str, count: int = 2) -> None:
    """Events published and committed by another connection."""
    with psycopg.connect(dsn) as other:
        for n in range(count):
            outbox.publish(other, type_, {"n": n})
        other.commit()


def test_a_transaction_that_published_nothing_sees_nothing(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """Committed events exist, this fresh transaction published none: nothing is found."""
    commit_elsewhere(dsn, "mail.received")
    outbox.publish(conn, "mail.received", {"mine": False})
    conn.commit()  # this connection's own, but an earlier transaction's
    conn.execute("SELECT 1")
    assert published_events(conn) == []
    with pytest.raises(AssertionError, match=r"published no 'mail\.received' event"):
        assert_published(conn, "mail.received")
    assert_published(conn, "mail.received", count=0)


def test_only_this_transactions_events_count_savepoints_included(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """Own events (in savepoints too) count; rolled back savepoints and others' commits do not."""
    outbox.publish(conn, "order.created", {"n": 1})
    with conn.transaction():  # a savepoint, as an app's atomic block inside a test's transaction
        outbox.publish(conn, "order.created", {"n": 2})
        with conn.transaction():
            outbox.publish(conn, "order.created", {"n": 3})
    with contextlib.suppress(RuntimeError), conn.transaction():
        outbox.publish(conn, "order.created", {"n": 4})
        raise RuntimeError("rolled back to the savepoint")
    done = threading.Event()

    def meanwhile() -> None:  # committed while ours is open, visible at READ COMMITTED
        commit_elsewhere(dsn, "order.created")
        done.set()

    threading.Thread(target=meanwhile).start()
    assert done.wait(10)
    assert [e["payload"]["n"] for e in published_events(conn)] == [1, 2, 3]
    assert_published(conn, "order.created", count=3)
    assert_published(conn, "order.created", {"n": 2})
    conn.rollback()
    assert published_events(conn) == []


@pytest.mark.parametrize("kind", SYNC_KINDS, ids=[k.__name__ for k in SYNC_KINDS])
def test_assert_published_takes_every_connection_kind_publish_takes(
        kind: Callable[[str], Any], dsn: str) -> None:
    """Through each sync kind (SQLAlchemy Session included): exactly this transaction's events."""
    commit_elsewhere(dsn, "kind.committed")
    with kind(dsn) as handle:
        handle: Handle  # type: ignore[no-redef]
        assert published_events(handle.target) == []
        first = handle.publish("kind.mine")
        assert [e["id"] for e in assert_published(handle.target, "kind.mine", count=1)] == [first]
        assert_published(handle.target, "kind.committed", count=0)
        handle.rollback()
