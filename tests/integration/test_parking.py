"""Parking keyed deliveries stuck behind their key: hidden from claims, never lost, in order."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

import outbox
from outbox.sql import queries
from tests.support.claiming import claim, finish

Conn = psycopg.Connection[Any]


def _setup(conn: Conn, keyed: int) -> list[uuid.UUID]:
    conn.execute("INSERT INTO outbox.endpoints (name, url) VALUES ('e', 'http://127.0.0.1:9/')")
    ids = outbox.publish_many(conn, [outbox.Event("t", {"n": i}, key="k") for i in range(keyed)])
    conn.commit()
    return ids


def _parked(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM outbox.deliveries "
                       "WHERE next_attempt_at = 'infinity'").fetchone()
    return int(row[0]) if row else -1


def _claim(conn: Conn) -> list[tuple[Any, ...]]:
    return claim(conn, [1])


def _finish(conn: Conn, row: tuple[Any, ...], state: str = "delivered") -> None:
    finish(conn, row, state)


def test_blocked_rows_are_parked_and_unparked_one_by_one_in_order(conn: Conn) -> None:
    """Parked rows are never claimed; finishing a key's delivery makes exactly the next one due."""
    ids = _setup(conn, 4)
    first = _claim(conn)
    assert [r[4] for r in first] == [ids[0]]
    parked = conn.execute(queries["park_blocked"], {"endpoint_ids": [1], "budget": 100})
    assert len(parked.fetchall()) == 3
    conn.commit()
    assert _claim(conn) == []
    for expected in ids[1:]:
        _finish(conn, first[0])
        first = _claim(conn)
        assert [r[4] for r in first] == [expected]
    _finish(conn, first[0], state="dead")
    assert _parked(conn) == 0


def test_an_orphaned_parked_row_is_made_due_again(conn: Conn) -> None:
    """A parked row whose predecessor finished unseen (a race) is found and made due."""
    ids = _setup(conn, 3)
    first = _claim(conn)
    conn.execute(queries["park_blocked"], {"endpoint_ids": [1], "budget": 100})
    # The predecessor finishes by a path that does not unpark (as in the race).
    conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now() "
                 "WHERE id = %s", (first[0][0],))
    conn.commit()
    assert _claim(conn) == []
    assert len(conn.execute(queries["unpark_orphans"]).fetchall()) == 1
    conn.commit()
    assert [r[4] for r in _claim(conn)] == [ids[1]]


def test_parking_leaves_unkeyed_and_head_rows_alone(conn: Conn) -> None:
    """Only keyed rows with an unfinished predecessor are parked; heads and unkeyed stay due."""
    conn.execute("INSERT INTO outbox.endpoints (name, url) VALUES ('e', 'http://127.0.0.1:9/')")
    outbox.publish_many(conn, [outbox.Event("t", {}, key=f"k{i}") for i in range(5)]
                        + [outbox.Event("t", {}) for _ in range(5)])
    conn.commit()
    assert conn.execute(queries["park_blocked"],
                        {"endpoint_ids": [1], "budget": 100}).fetchall() == []
    conn.commit()
    assert len(_claim(conn)) == 10
