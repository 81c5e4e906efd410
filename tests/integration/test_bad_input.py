"""Bad input is refused before any SQL reaches the server, so the caller's transaction stays
usable and still commits its other work.

"Before any SQL" is checked on the wire: libpq's protocol trace for psycopg,
a counting proxy around a real psycopg2 connection for DB-API callers.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg2
import pytest

import outbox
from tests.support.publishing import committed, committed_event_ids, traced

MIB = 1024 * 1024

# (label, arguments of publish, expected error)
BAD: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("empty type", {"type": ""}, outbox.InvalidEvent),
    ("malformed type", {"type": "mail..received"}, outbox.InvalidEvent),
    ("glob in type", {"type": "mail.*"}, outbox.InvalidEvent),
    ("type not str", {"type": 42}, outbox.InvalidEvent),
    ("payload set", {"payload": {1, 2}}, outbox.InvalidEvent),
    ("payload NaN", {"payload": {"x": float("nan")}}, outbox.InvalidEvent),
    ("payload object", {"payload": object()}, outbox.InvalidEvent),
    ("payload over 1 MiB", {"payload": "x" * MIB}, outbox.PayloadTooLarge),
    ("empty key", {"key": ""}, outbox.InvalidEvent),
    ("key not str", {"key": 7}, outbox.InvalidEvent),
    ("key too long", {"key": "k" * 256}, outbox.InvalidEvent),
    ("headers not a mapping", {"headers": [("x-a", "1")]}, outbox.InvalidEvent),
    ("bad header name", {"headers": {"bad name": "v"}}, outbox.InvalidEvent),
    ("header value not str", {"headers": {"x-a": 1}}, outbox.InvalidEvent),
    ("header value CR/LF", {"headers": {"x-a": "a\r\nx-evil: 1"}}, outbox.InvalidEvent),
    ("header value not ASCII", {"headers": {"x-a": "clé"}}, outbox.InvalidEvent),
    ("reserved content-type", {"headers": {"Content-Type": "text/plain"}}, outbox.InvalidEvent),
    ("reserved webhook-id", {"headers": {"webhook-id": "forged"}}, outbox.InvalidEvent),
    ("negative delay", {"delay": timedelta(seconds=-1)}, outbox.InvalidEvent),
    ("idempotency_key not str", {"idempotency_key": 42}, outbox.InvalidEvent),
]


def _call(args: dict[str, Any]) -> dict[str, Any]:
    """Full publish arguments: a good event with the bad part swapped in."""
    return {"type": "mail.received", "payload": {"ok": True}, **args}


def _start_business_work(conn: Any) -> None:
    """The caller's own change in its open transaction (the table is created and committed)."""
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS app_orders (id int PRIMARY KEY)")
    conn.commit()
    cur.execute("INSERT INTO app_orders VALUES (1)")
    cur.close()


@pytest.mark.parametrize(("label", "args", "error"), BAD, ids=[case[0] for case in BAD])
def test_refused_before_sql_and_transaction_survives(
        label: str, args: dict[str, Any], error: type[Exception],
        conn: psycopg.Connection[Any], dsn: str, tmp_path: Path) -> None:
    """Each bad input raises its error with no message on the wire; the caller still commits."""
    _start_business_work(conn)
    with traced(conn, tmp_path / "trace") as messages:
        with pytest.raises(error) as raised:
            outbox.publish(conn, **_call(args))
        conn.execute("SELECT 'marker-after-refusal'").fetchall()
    assert isinstance(raised.value, outbox.OutboxError)
    assert messages, "the trace recorded nothing: it cannot prove anything"
    assert "marker-after-refusal" in messages[0], f"{label}: sent {messages[0]}"
    conn.commit()
    assert committed(dsn, "SELECT id FROM app_orders") == [(1,)]
    assert committed_event_ids(dsn) == []


def test_invalid_event_is_a_value_error() -> None:
    """InvalidEvent is also a ValueError; PayloadTooLarge and it are OutboxErrors."""
    assert issubclass(outbox.InvalidEvent, ValueError)
    assert issubclass(outbox.InvalidEvent, outbox.OutboxError)
    assert issubclass(outbox.PayloadTooLarge, outbox.OutboxError)


class CountingConnection:
    """A real psycopg2 connection that counts the cursors asked of it (all SQL needs one)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.cursors = 0

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        self.cursors += 1
        return self.real.cursor(*args, **kwargs)


def test_dbapi_connection_sees_no_cursor_for_bad_input(dsn: str) -> None:
    """Through a DB-API connection, no bad input opens a cursor; the transaction commits."""
    real = psycopg2.connect(dsn)
    try:
        _start_business_work(real)
        proxy = CountingConnection(real)
        for label, args, error in BAD:
            with pytest.raises(error):
                outbox.publish(proxy, **_call(args))
            assert proxy.cursors == 0, label
        with pytest.raises(outbox.InvalidEvent):
            outbox.publish_many(proxy, [outbox.Event("mail.received", {}),
                                        outbox.Event("mail.received", {1})])
        assert proxy.cursors == 0
        good = outbox.publish(proxy, "mail.received", {})
        assert proxy.cursors == 1  # the proxy does see real work
        real.commit()
    finally:
        real.close()
    assert committed(dsn, "SELECT id FROM app_orders") == [(1,)]
    assert committed_event_ids(dsn) == [good]


def test_one_bad_event_refuses_the_whole_batch(
        conn: psycopg.Connection[Any], dsn: str, tmp_path: Path) -> None:
    """publish_many with one bad event sends nothing at all, not even the good events."""
    _start_business_work(conn)
    events = [outbox.Event("mail.received", {"n": 1}),
              outbox.Event("mail.received", {"n": 2}, headers={"x-a": "a\nb"})]
    with (traced(conn, tmp_path / "trace") as messages,
          pytest.raises(outbox.InvalidEvent, match="x-a")):
        outbox.publish_many(conn, events)
    assert messages == []
    conn.commit()
    assert committed_event_ids(dsn) == []
    assert committed(dsn, "SELECT id FROM app_orders") == [(1,)]


def test_apublish_refuses_before_sql(dsn: str) -> None:
    """apublish validates before touching the connection too."""
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            await aconn.execute("CREATE TABLE app_orders (id int PRIMARY KEY)")
            await aconn.commit()
            await aconn.execute("INSERT INTO app_orders VALUES (1)")
            with pytest.raises(outbox.PayloadTooLarge):
                await outbox.apublish(aconn, "mail.received", "x" * MIB)
            await aconn.commit()
    asyncio.run(scenario())
    assert committed(dsn, "SELECT id FROM app_orders") == [(1,)]
