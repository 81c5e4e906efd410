"""`--once` ends with its summary; JSON log lines carry the event's fields, each line once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg

from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import add_endpoint, publish, run_once

Conn = psycopg.Connection[Any]


def by_path(request: Request) -> Response:
    """/ok answers 200, /bad 400 (dead at once), /later 503 (retried much later)."""
    return Response({"/ok": 200, "/bad": 400}.get(request.path, 503))


def scene(conn: Conn, receiver: Receiver) -> dict[str, Any]:
    receiver.responder = by_path
    for name, pattern in (("ok", "a.*"), ("bad", "b.*"), ("later", "c.*")):
        add_endpoint(conn, name, receiver.url.rstrip("/") + "/" + name, events=(pattern,),
                     min_backoff_seconds=300, max_backoff_seconds=600)
    return {kind: publish(conn, f"{kind}.happened", {"n": 1}) for kind in ("a", "b", "c")}


def test_once_ends_with_a_summary(conn: Conn, dsn: str, receiver: Receiver) -> None:
    """One delivered, one dead-lettered, one retried later: the last line counts them; exit 1."""
    scene(conn, receiver)
    code, log = run_once(dsn)
    assert code == 1, log
    last = log.strip().splitlines()[-1]
    assert last.endswith("stopped after one pass: 1 delivered, 1 retried, 1 dead-lettered, "
                         "1 left waiting"), log


def test_json_logs_carry_fields_once(conn: Conn, dsn: str, receiver: Receiver) -> None:
    """The dead-letter line has event_id, endpoint, attempt, status, reason; "1 attempt"."""
    ids = scene(conn, receiver)
    code, log = run_once(dsn, "--log-format", "json")
    assert code == 1, log
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    [dead] = [e for e in entries if "dead-lettered after" in e["message"]]
    assert (dead["event_id"], dead["endpoint"], dead["attempt"], dead["status"],
            dead["reason"]) == (str(ids["b"]), "bad", 1, 400, "http_4xx")
    assert "after 1 attempt:" in dead["message"]
    messages = [e["message"] for e in entries]
    assert len(messages) == len(set(messages)), messages


def test_a_failed_attempt_is_a_warning_saying_when_it_is_tried_again(
        conn: Conn, dsn: str, receiver: Receiver) -> None:
    """The attempt answered 503 is a WARNING line with its event, endpoint, attempt,
    status and reason, and the time of its next attempt (300 to 360 s on)."""
    ids = scene(conn, receiver)
    code, log = run_once(dsn, "--log-format", "json")
    assert code == 1, log
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    [failed] = [e for e in entries if e.get("endpoint") == "later"]
    assert failed["level"] == "warning", failed
    assert (failed["event_id"], failed["attempt"], failed["status"], failed["reason"]) == (
        str(ids["c"]), 1, 503, "http_5xx")
    assert failed["message"].startswith(f"attempt 1 of event {ids['c']} to later failed: "
                                        "HTTP 503"), failed
    assert "; next attempt in " in failed["message"]
    assert datetime.fromisoformat(failed["next"]) > datetime.now(UTC)
