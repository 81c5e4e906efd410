"""Helpers for the operator-command tests: endpoints by SQL, and the dispatcher's effects faked.

The dispatcher moves deliveries pending -> in_flight -> delivered | dead; these
tests put rows in those states with plain UPDATEs, so that each command is
checked against a known database without running a dispatcher.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

import outbox
from outbox.retention import uuid7_floor


def add_endpoint(conn: psycopg.Connection[Any], name: str, *patterns: str,
                 enabled: bool = True) -> int:
    """A live endpoint subscribed to ``patterns`` (globs; default every type). Commits."""
    globs = list(patterns) or ["*"]
    likes = [p.replace("%", r"\%").replace("_", r"\_").replace("*", "%") for p in globs]
    row = conn.execute(
        "INSERT INTO outbox.endpoints (name, url, events, events_like, enabled) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (name, f"http://127.0.0.1:9/{name}", globs, likes, enabled)).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def publish(conn: psycopg.Connection[Any], event_type: str = "mail.received",
            key: str | None = None) -> uuid.UUID:
    """One event, committed."""
    event_id = outbox.publish(conn, event_type, {"n": 1}, key=key)
    conn.commit()
    return event_id


def set_state(conn: psycopg.Connection[Any], event_id: uuid.UUID, endpoint: str, state: str,
              *, error: str | None = None, status: int | None = None,
              finished_ago: str = "0 seconds") -> None:
    """Do to a delivery what a dispatcher would; ``finished_ago`` backdates finished_at."""
    conn.execute(
        """
        UPDATE outbox.deliveries d SET state = %(state)s,
               attempts = CASE WHEN %(state)s = 'pending' THEN d.attempts ELSE 3 END,
               lease_token = CASE WHEN %(state)s = 'in_flight' THEN gen_random_uuid() END,
               lease_expires_at = CASE WHEN %(state)s = 'in_flight'
                                       THEN now() + interval '1 minute' END,
               last_error = %(error)s, last_status = %(status)s,
               finished_at = CASE WHEN %(state)s IN ('delivered', 'dead', 'discarded')
                                  THEN now() - %(ago)s::interval END
        FROM outbox.endpoints e
        WHERE e.id = d.endpoint_id AND e.name = %(endpoint)s AND d.event_id = %(event_id)s
        """,
        {"state": state, "error": error, "status": status, "ago": finished_ago,
         "endpoint": endpoint, "event_id": event_id})
    conn.commit()


def age_event(conn: psycopg.Connection[Any], event_id: uuid.UUID, days: int) -> uuid.UUID:
    """Make an event look ``days`` old: created_at and its UUIDv7 id both. Returns the new id.

    The id cannot be updated in place while deliveries reference it, so the row
    is copied under an old id, its deliveries moved over, and the original deleted.
    """
    row = conn.execute("SELECT now() - make_interval(days => %s)", (days,)).fetchone()
    assert row is not None
    random_bits = event_id.int & ((1 << 62) - 1)  # keeps ids distinct
    new_id = uuid.UUID(int=uuid7_floor(row[0]).int | (7 << 76) | (2 << 62) | random_bits)
    conn.execute(
        """
        INSERT INTO outbox.events (id, seq, type, key, payload, headers, idempotency_key,
                                   created_at, deliver_after, unrouted)
        OVERRIDING SYSTEM VALUE
        SELECT %(new)s, seq, type, key, payload, headers, idempotency_key,
               created_at - make_interval(days => %(days)s),
               deliver_after - make_interval(days => %(days)s), unrouted
        FROM outbox.events WHERE id = %(old)s
        """, {"new": new_id, "old": event_id, "days": days})
    conn.execute("UPDATE outbox.deliveries SET event_id = %s, "
                 "created_at = created_at - make_interval(days => %s) WHERE event_id = %s",
                 (new_id, days, event_id))
    conn.execute("DELETE FROM outbox.events WHERE id = %s", (event_id,))
    conn.commit()
    return new_id


def deliveries(conn: psycopg.Connection[Any], event_id: uuid.UUID) -> list[tuple[Any, ...]]:
    """(endpoint name, state, attempts, last_error) of an event's deliveries, oldest first."""
    rows = conn.execute(
        "SELECT e.name, d.state, d.attempts, d.last_error FROM outbox.deliveries d "
        "JOIN outbox.endpoints e ON e.id = d.endpoint_id WHERE d.event_id = %s ORDER BY d.id",
        (event_id,)).fetchall()
    conn.commit()
    return rows


def count(conn: psycopg.Connection[Any], table: str) -> int:
    """Rows in outbox.events or outbox.deliveries."""
    query = {"events": "SELECT count(*) FROM outbox.events",
             "deliveries": "SELECT count(*) FROM outbox.deliveries"}[table]
    row = conn.execute(query).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def unrouted(conn: psycopg.Connection[Any], event_id: uuid.UUID) -> bool:
    row = conn.execute("SELECT unrouted FROM outbox.events WHERE id = %s", (event_id,)).fetchone()
    conn.commit()
    assert row is not None
    return bool(row[0])


def snapshot(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Everything the commands could change, to show that a refused one changed nothing."""
    rows = conn.execute(
        "SELECT 'e', id::text, unrouted::text, NULL FROM outbox.events "
        "UNION ALL SELECT 'd', id::text, state, attempts::text FROM outbox.deliveries "
        "ORDER BY 1, 2").fetchall()
    conn.commit()
    return rows
