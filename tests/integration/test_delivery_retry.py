"""Retries, dead letters and --once exit codes: the real dispatcher against a real receiver.

Each test scripts the receiver's answers, runs ``python -m dispatcher`` as a
subprocess (with ``--once`` when one pass is enough, else long-running and
stopped with SIGTERM) and checks the deliveries' rows and what arrived.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import psycopg
import pytest

from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    delivery,
    outbox_cli,
    publish,
    run_once,
    wait_for_state,
)


def scripted(*statuses: int, headers: dict[str, str] | None = None,
             ) -> tuple[Any, list[int]]:
    """A responder answering ``statuses`` in turn (the last one from then on), and its log."""
    answered: list[int] = []
    sequence = itertools.chain(statuses, itertools.repeat(statuses[-1]))

    def respond(_: Request) -> Response:
        status = next(sequence)
        answered.append(status)
        return Response(status, headers=dict(headers or {}) if status != 200 else {})
    return respond, answered


def test_retries_until_success_with_the_same_webhook_id(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """503, 503, then 200: delivered after 3 attempts, every attempt with the same webhook-id."""
    receiver.responder, _ = scripted(503, 503, 200)
    add_endpoint(conn, "flaky", receiver.url)
    event_id = publish(conn, "order.created", {"order": 1})
    with Dispatcher(dsn) as dispatcher:
        row = wait_for_state(conn, event_id, "delivered", dispatcher=dispatcher)
        assert dispatcher.stop() == 0
    assert row["attempts"] == 3
    assert row["last_status"] == 200
    requests = receiver.snapshot()
    assert len(requests) == 3
    assert {r.header("webhook-id") for r in requests} == {str(event_id)}


def test_dead_letter_when_the_attempts_run_out(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """Always 500: dead after max_attempts, with last_error, last_status and `outbox dead list`."""
    receiver.responder = lambda _: Response(500, body=b"storage unavailable")
    add_endpoint(conn, "broken", receiver.url, max_attempts=3)
    event_id = publish(conn, "order.created", {"order": 2}, key="order-2")
    with Dispatcher(dsn) as dispatcher:
        row = wait_for_state(conn, event_id, "dead", dispatcher=dispatcher)
        assert dispatcher.stop() == 0
    assert row["attempts"] == 3
    assert row["last_status"] == 500
    assert "500" in row["last_error"]
    assert len(receiver.snapshot()) == 3

    listed = outbox_cli(dsn, "dead", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [letter] = [d for d in json.loads(listed.stdout) if d["event_id"] == str(event_id)]
    assert letter["endpoint"] == "broken"
    assert letter["type"] == "order.created"
    assert letter["key"] == "order-2"
    assert letter["attempts"] == 3
    assert letter["last_status"] == 500
    assert "500" in letter["last_error"]
    assert letter["failed_at"]


@pytest.mark.parametrize("status", [400, 404, 422])
def test_permanent_4xx_is_dead_at_once(conn: psycopg.Connection[Any], dsn: str,
                                       receiver: Receiver, status: int) -> None:
    """A 4xx other than 408/425/429 is dead-lettered after one attempt; --once exits 1."""
    receiver.responder = lambda _: Response(status)
    add_endpoint(conn, "strict", receiver.url, max_attempts=5)
    event_id = publish(conn, "order.created", {"order": 3})
    code, log = run_once(dsn)
    assert code == 1, log
    row = delivery(conn, event_id)
    assert (row["state"], row["attempts"], row["last_status"]) == ("dead", 1, status)
    assert str(status) in row["last_error"]
    assert len(receiver.snapshot()) == 1


def test_410_gone_dead_letters_and_disables_the_endpoint(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """410 Gone: the delivery is dead at once and the endpoint is disabled with a reason."""
    receiver.responder = lambda _: Response(410)
    add_endpoint(conn, "gone", receiver.url)
    event_id = publish(conn, "order.created", {"order": 4})
    code, log = run_once(dsn)
    assert code == 1, log
    row = delivery(conn, event_id)
    assert (row["state"], row["attempts"], row["last_status"]) == ("dead", 1, 410)
    endpoint = conn.execute("SELECT enabled, disabled_reason FROM outbox.endpoints "
                            "WHERE name = 'gone'").fetchone()
    assert endpoint is not None
    enabled, reason = endpoint
    assert enabled is False
    assert "410" in (reason or "")


def test_retry_after_is_honoured_past_max_backoff(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """429 with Retry-After: 2 delays the next attempt by about 2 s, beyond max_backoff 0.2 s."""
    receiver.responder, _ = scripted(429, 200, headers={"Retry-After": "2"})
    add_endpoint(conn, "busy", receiver.url, max_backoff_seconds=0.2)
    event_id = publish(conn, "order.created", {"order": 5})
    with Dispatcher(dsn) as dispatcher:
        row = wait_for_state(conn, event_id, "delivered", dispatcher=dispatcher)
        assert dispatcher.stop() == 0
    assert row["attempts"] == 2
    first, second = receiver.snapshot()
    assert second.received_at - first.received_at >= 1.9


def test_redirects_are_not_followed(conn: psycopg.Connection[Any], dsn: str,
                                    receiver: Receiver) -> None:
    """A 302 is not followed: the Location gets nothing and the delivery is dead."""
    elsewhere = receiver.url + "elsewhere"
    receiver.responder = lambda req: (Response(302, headers={"Location": elsewhere})
                                      if req.path == "/hook" else Response(200))
    add_endpoint(conn, "moved", receiver.url + "hook")
    event_id = publish(conn, "order.created", {"order": 6})
    code, log = run_once(dsn)
    assert code == 1, log
    assert [r.path for r in receiver.snapshot()] == ["/hook"]
    row = delivery(conn, event_id)
    assert (row["state"], row["last_status"]) == ("dead", 302)


def test_hanging_endpoint_is_cut_off_at_its_timeout_and_retried(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """An endpoint that never answers is abandoned after timeout_seconds, retried, then dead."""
    receiver.responder = lambda _: Response(200, delay=30)
    add_endpoint(conn, "hanging", receiver.url, timeout_seconds=1, max_attempts=2)
    event_id = publish(conn, "order.created", {"order": 7})
    with Dispatcher(dsn) as dispatcher:
        row = wait_for_state(conn, event_id, "dead", timeout=15, dispatcher=dispatcher)
        assert dispatcher.stop() == 0
    assert row["attempts"] == 2
    assert row["last_status"] is None
    assert "timeout" in row["last_error"].lower()
    assert len(receiver.snapshot()) == 2


def test_once_exits_0_when_everything_was_delivered(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """--once delivers everything due and exits 0 when nothing was dead-lettered."""
    add_endpoint(conn, "fine", receiver.url)
    ids = [publish(conn, "order.created", {"order": n}) for n in range(5)]
    code, log = run_once(dsn)
    assert code == 0, log
    assert {delivery(conn, event_id)["state"] for event_id in ids} == {"delivered"}
    assert len(receiver.snapshot()) == 5


def test_once_exits_1_when_something_was_dead_lettered(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """--once exits 1 when any delivery was dead-lettered, even if others succeeded."""
    receiver.responder = lambda req: Response(400 if req.path == "/bad" else 200)
    add_endpoint(conn, "good", receiver.url + "good")
    add_endpoint(conn, "bad", receiver.url + "bad")
    event_id = publish(conn, "order.created", {"order": 8})
    code, log = run_once(dsn)
    assert code == 1, log
    assert delivery(conn, event_id, "good")["state"] == "delivered"
    assert delivery(conn, event_id, "bad")["state"] == "dead"
