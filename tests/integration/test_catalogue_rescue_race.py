"""Fault catalogue: the lease rescue racing a completion, on the real statements.

River shipped a rescuer that matched rows by id alone and brought back to
life jobs completed a moment before (riverqueue/river #1302). Here the two
statements the dispatchers run, ``complete`` and ``rescue_expired``, are made
to collide on one row in both orders, each in its own session, the second
one blocked on the first one's row lock until that commits. A lease that ran
out is made by back-dating it.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

import outbox
from dispatcher.policy.model import ClaimRow, Record
from outbox.sql import queries
from tests.support.claiming import claim, complete
from tests.support.publishing import wait_until_blocked

Conn = psycopg.Connection[Any]


def _claimed_and_expired(conn: Conn) -> tuple[Any, ...]:
    """One delivery claimed by a dispatcher whose lease has since run out."""
    row = conn.execute("INSERT INTO outbox.endpoints (name, url) VALUES ('e', "
                       "'http://127.0.0.1:9/') RETURNING id").fetchone()
    assert row is not None
    outbox.publish(conn, "t", {"n": 1})
    conn.commit()
    [claimed] = claim(conn, [int(row[0])], rows=1)
    conn.execute("UPDATE outbox.deliveries SET lease_expires_at = now() - interval '1 second'")
    conn.commit()
    return claimed


def _complete(conn: Conn, claimed: tuple[Any, ...]) -> frozenset[int]:
    """The dispatcher's result write: delivered, guarded by the lease token; what it wrote."""
    row = ClaimRow._make(claimed)
    return complete(conn, [Record(row.id, row.lease_token, "delivered", status=200)],
                    commit=False).written


def _in_thread(dsn: str, run: Any) -> tuple[threading.Thread, list[Any], int]:
    """Run ``run(conn)`` on a new autocommit session in a thread; its result lands in a list."""
    out: list[Any] = []
    session = psycopg.connect(dsn, autocommit=True)
    pid = session.info.backend_pid

    def target() -> None:
        with session:
            out.append(run(session))
    thread = threading.Thread(target=target)
    thread.start()
    return thread, out, pid


def _row(conn: Conn) -> tuple[Any, ...]:
    row = conn.execute("SELECT state, attempts, lease_token IS NULL, last_status "
                       "FROM outbox.deliveries").fetchone()
    conn.commit()
    assert row is not None
    return tuple(row)


def test_rescue_behind_a_completion_leaves_it_delivered(conn: Conn, dsn: str) -> None:
    """A rescue blocked behind a completion of an expired lease finds it delivered: untouched."""
    claimed = _claimed_and_expired(conn)
    with psycopg.connect(dsn) as completer:
        assert len(_complete(completer, claimed)) == 1  # written, not yet committed
        thread, rescued, pid = _in_thread(
            dsn, lambda s: s.execute(queries["rescue_expired"]).fetchall())
        wait_until_blocked(dsn, pid)
        completer.commit()
        thread.join(10)
    assert rescued == [[]], "the rescue brought a completed delivery back to pending"
    assert _row(conn) == ("delivered", 1, True, 200)


def test_completion_behind_a_rescue_is_fenced(conn: Conn, dsn: str) -> None:
    """A late result blocked behind the rescue of its lease writes nothing: pending, sent again."""
    claimed = _claimed_and_expired(conn)
    with psycopg.connect(dsn) as rescuer:
        assert len(rescuer.execute(queries["rescue_expired"]).fetchall()) == 1
        thread, written, pid = _in_thread(dsn, lambda s: _complete(s, claimed))
        wait_until_blocked(dsn, pid)
        rescuer.commit()
        thread.join(10)
    assert written == [frozenset()], "a result was written under a lease that had been taken back"
    assert _row(conn) == ("pending", 1, True, None)
