"""The harness itself: a fresh migrated database per test, and a working receiver."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from outbox.testing import Receiver, Response


def test_fresh_database_is_migrated_and_empty(conn: psycopg.Connection[Any]) -> None:
    """Each test starts from an empty, migrated outbox schema."""
    row = conn.execute("SELECT count(*) FROM outbox.events").fetchone()
    assert row == (0,)


def test_receiver_records_and_answers(receiver: Receiver) -> None:
    """The receiver records requests and answers as scripted."""
    receiver.responder = lambda req: Response(503 if req.path == "/fail" else 204)
    with httpx.Client() as client:
        assert client.post(receiver.url + "fail", content=b"x").status_code == 503
        assert client.post(receiver.url, json={"a": 1}).status_code == 204
    got = receiver.wait_for(2)
    assert [r.path for r in got] == ["/fail", "/"]
    assert got[1].body == b'{"a":1}'
