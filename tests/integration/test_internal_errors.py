"""A bug of the dispatcher's own fails the attempt; it never strands the delivery.

The bug is injected into a real dispatcher process (a ``sitecustomize``
module on its PYTHONPATH wraps one function so that it raises for events of
type ``order.boom``); the database and the receiver are real. Without the
safety net the delivery task ended with nothing written, and the delivery
stayed in flight under a lease its dispatcher kept extending.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox.testing import Receiver
from tests.support.dispatcher import add_endpoint, delivery, publish, run_once

BUGS = {
    # Encoding and signing, before any request is sent.
    "encode": """
import dispatcher.deliver as deliver
real = deliver.encode
def encode(endpoint, events, now, **options):
    if any(e.type == "order.boom" for e in events):
        raise RuntimeError("injected bug")
    return real(endpoint, events, now, **options)
deliver.encode = encode
""",
    # Deciding the outcome, after the answer came back (the fallback decides anew).
    "decide": """
import dispatcher.deliver as deliver
real = deliver.decide
def decide(delivery, endpoint, result, *args, **kwargs):
    if delivery.event.type == "order.boom" and result is not deliver.INTERNAL_ERROR:
        raise RuntimeError("injected bug")
    return real(delivery, endpoint, result, *args, **kwargs)
deliver.decide = decide
""",
}


@pytest.mark.parametrize("where", sorted(BUGS))
def test_a_bug_fails_the_attempt_and_the_delivery_goes_on(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver, tmp_path: Path,
        where: str) -> None:
    """The broken event is dead-lettered with an internal error; the others are delivered."""
    (tmp_path / "sitecustomize.py").write_text(BUGS[where])
    add_endpoint(conn, "hooks", receiver.url, max_attempts=1)
    broken = publish(conn, "order.boom", {"n": 1})
    healthy = publish(conn, "order.created", {"n": 2})
    code, log = run_once(dsn, env={"PYTHONPATH": str(tmp_path)})
    assert code == 1, log  # --once: something failed
    assert "injected bug" in log  # the traceback is in the log, for whoever fixes it
    row = delivery(conn, broken)
    assert (row["state"], row["attempts"]) == ("dead", 1)
    assert row["last_error"] == "request failed: internal error in the dispatcher (see its log)"
    assert delivery(conn, healthy)["state"] == "delivered"
    state = conn.execute("SELECT circuit, failures FROM outbox.endpoint_state").fetchone()
    conn.commit()
    assert state == ("closed", 0)  # the endpoint is not blamed for our bug
