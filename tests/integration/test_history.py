"""The attempt history and `outbox show`: the real dispatcher records, the command tells.

A scripted receiver fails some attempts; the dispatcher writes one history
row per failed attempt in the statement recording it, none for a success;
`outbox show` puts them together per endpoint, retries and replays go on
counting, and the history goes when its delivery goes.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from typing import Any

import psycopg

import outbox
from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    outbox_cli,
    publish,
    run_once,
    wait_for_state,
    wait_until,
)

Conn = psycopg.Connection[Any]
_EVENT_KEYS = {"event_id", "type", "key", "tenant", "created_at", "trace_id", "deliveries"}
_DELIVERY_KEYS = {"endpoint", "state", "attempts", "next_attempt_at", "last_error",
                  "last_status", "history"}
_ATTEMPT_KEYS = {"attempt", "at", "status", "reason", "duration_seconds", "error"}
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def scripted(*statuses: int) -> Any:
    """A responder answering ``statuses`` in turn, then the last one from then on."""
    sequence = itertools.chain(statuses, itertools.repeat(statuses[-1]))

    def respond(_: Request) -> Response:
        status = next(sequence)
        return Response(status, body=b"try later" if status >= 500 else b"")
    return respond


def show(dsn: str, event_id: uuid.UUID) -> dict[str, Any]:
    result = outbox_cli(dsn, "show", str(event_id), "--json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def history_rows(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM outbox.attempts").fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def test_failed_attempts_are_recorded_and_a_success_adds_no_row(
        conn: Conn, dsn: str, receiver: Receiver) -> None:
    """503, 503, 200: two history rows; show gives all three attempts in the documented shape."""
    receiver.responder = scripted(503, 503, 200)
    add_endpoint(conn, "flaky", receiver.url)
    event_id = publish(conn, "order.created", {"order": 1}, key="o-1")
    with Dispatcher(dsn) as dispatcher:
        wait_until(lambda: show(dsn, event_id)["deliveries"][0]["state"] == "delivered",
                   dispatcher=dispatcher, what="the replay to be delivered")
        assert dispatcher.stop() == 0
    assert history_rows(conn) == 2
    doc = show(dsn, event_id)
    assert set(doc) == _EVENT_KEYS
    assert (doc["event_id"], doc["type"], doc["key"]) == (str(event_id), "order.created", "o-1")
    assert doc["trace_id"] is None
    assert _RFC3339.match(doc["created_at"])
    [block] = doc["deliveries"]
    assert set(block) == _DELIVERY_KEYS
    assert (block["endpoint"], block["state"], block["attempts"]) == ("flaky", "delivered", 3)
    assert (block["last_status"], block["next_attempt_at"]) == (200, None)
    history = block["history"]
    assert [set(a) for a in history] == [_ATTEMPT_KEYS] * 3
    assert [a["attempt"] for a in history] == [1, 2, 3]
    assert [a["status"] for a in history] == [503, 503, 200]
    assert [a["reason"] for a in history] == ["http_5xx", "http_5xx", None]
    assert "try later" in history[0]["error"]
    assert history[2]["error"] is None
    assert all(a["duration_seconds"] is not None and a["duration_seconds"] >= 0
               for a in history)
    assert all(_RFC3339.match(a["at"]) for a in history)
    assert history[0]["at"] <= history[1]["at"] <= history[2]["at"]

    text = outbox_cli(dsn, "show", str(event_id))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"event {event_id}"
    assert "flaky: delivered, 3 attempts" in lines
    attempt_lines = [line for line in lines if line.startswith("  #")]
    assert len(attempt_lines) == 3
    assert "http_5xx" in attempt_lines[0]
    assert attempt_lines[2].split()[-1] == "ok"


def test_all_success_writes_no_history(conn: Conn, dsn: str, receiver: Receiver) -> None:
    """Every first attempt succeeds: the history table stays empty; show still tells them."""
    add_endpoint(conn, "fine", receiver.url)
    ids = [publish(conn, "order.created", {"order": n}) for n in range(5)]
    code, log = run_once(dsn)
    assert code == 0, log
    assert history_rows(conn) == 0
    [block] = show(dsn, ids[0])["deliveries"]
    assert [(a["attempt"], a["status"], a["reason"]) for a in block["history"]] == [
        (1, 200, None)]


def test_retry_and_replay_go_on_counting(conn: Conn, dsn: str, receiver: Receiver) -> None:
    """Dead after 2 failures, retried, dead again, replayed, delivered: attempts 1 to 5."""
    receiver.responder = scripted(500, 500, 500, 500, 200)
    add_endpoint(conn, "later", receiver.url, max_attempts=2)
    event_id = publish(conn, "order.created", {"order": 2})
    with Dispatcher(dsn) as dispatcher:
        wait_for_state(conn, event_id, "dead", dispatcher=dispatcher)
        retried = outbox_cli(dsn, "dead", "retry", "--event-id", str(event_id))
        assert retried.stdout.strip() == "1 dead delivery retried", retried.stderr
        wait_for_state(conn, event_id, "dead", dispatcher=dispatcher)
        [block] = show(dsn, event_id)["deliveries"]
        assert (block["state"], block["attempts"]) == ("dead", 4)
        assert [a["attempt"] for a in block["history"]] == [1, 2, 3, 4]
        replayed = outbox_cli(dsn, "replay", "--endpoint", "later", "--event-id", str(event_id))
        assert replayed.returncode == 0, replayed.stderr
        wait_until(lambda: show(dsn, event_id)["deliveries"][0]["state"] == "delivered",
                   dispatcher=dispatcher, what="the replay to be delivered")
        assert dispatcher.stop() == 0
    [block] = show(dsn, event_id)["deliveries"]  # one block per endpoint, replays included
    assert (block["state"], block["attempts"]) == ("delivered", 5)
    assert [(a["attempt"], a["reason"]) for a in block["history"]] == [
        (1, "http_5xx"), (2, "http_5xx"), (3, "http_5xx"), (4, "http_5xx"), (5, None)]


def test_history_goes_with_its_delivery(conn: Conn, dsn: str, receiver: Receiver) -> None:
    """Discarding a dead letter, purging a delivered one, or any DELETE removes its history."""
    receiver.responder = scripted(500, 500, 200)
    add_endpoint(conn, "gone", receiver.url, max_attempts=1, events=("order.*",))
    dead = publish(conn, "order.created", {"order": 3})
    assert run_once(dsn)[0] == 1
    add_endpoint(conn, "kept", receiver.url, events=("mail.*",))
    assert history_rows(conn) == 1
    discarded = outbox_cli(dsn, "dead", "discard", "--event-id", str(dead))
    assert discarded.stdout.strip() == "1 dead delivery discarded", discarded.stderr
    assert history_rows(conn) == 0
    delivered = publish(conn, "mail.sent", {"mail": 1})
    with Dispatcher(dsn) as dispatcher:
        wait_for_state(conn, delivered, "delivered", dispatcher=dispatcher)
        assert dispatcher.stop() == 0
    assert history_rows(conn) == 1  # the one 500 before its 200
    conn.execute("UPDATE outbox.deliveries SET finished_at = now() - interval '2 days' "
                 "WHERE event_id = %s", (delivered,))
    conn.commit()
    purged = outbox_cli(dsn, "purge", "--older-than", "1d")
    assert purged.returncode == 0, purged.stderr
    assert history_rows(conn) == 0


def test_show_refuses_unknown_and_malformed_ids(dsn: str) -> None:
    """An unknown id exits 1 with one line; a malformed one is a usage error, exit 2."""
    unknown = outbox_cli(dsn, "show", str(uuid.uuid4()))
    assert unknown.returncode == 1
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert "no event" in unknown.stderr
    assert unknown.stdout == ""
    malformed = outbox_cli(dsn, "show", "not-an-id")
    assert malformed.returncode == 2
    assert "not a UUID" in malformed.stderr


def test_show_names_the_trace_the_event_was_published_in(conn: Conn, dsn: str) -> None:
    """The traceparent an event was published with gives show's trace_id; none gives null."""
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    traced = outbox.publish(conn, "t.traced", {},
                            headers={"traceparent": f"00-{trace}-00f067aa0ba902b7-01"})
    plain = outbox.publish(conn, "t.plain", {})
    conn.commit()
    assert show(dsn, traced)["trace_id"] == trace
    assert show(dsn, plain)["trace_id"] is None


def test_show_payload_prints_the_payload_only_when_asked(conn: Conn, dsn: str) -> None:
    """show --payload adds the payload (text: indented JSON after the trace line; --json:
    the key "payload", the value as published); without it, neither has it."""
    data = {"order_id": 7, "note": "für\u202e", "items": [1, 2]}
    event_id = outbox.publish(conn, "order.created", data)
    conn.commit()
    assert "payload" not in show(dsn, event_id)
    shown = outbox_cli(dsn, "show", str(event_id), "--json", "--payload")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["payload"] == data
    text = outbox_cli(dsn, "show", str(event_id), "--payload")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[5] == "  payload"
    assert lines[6:8] == ["    {", '      "order_id": 7,']
    assert "\u202e" not in text.stdout  # a bidi control cannot reorder the terminal's line
    assert "payload" not in outbox_cli(dsn, "show", str(event_id)).stdout


def test_events_list_finds_events_newest_first_with_their_deliveries(
        conn: Conn, dsn: str) -> None:
    """events list: newest first, each endpoint's delivery state, narrowed by --type, --key
    and --since as replay narrows, --limit; --json in its documented shape; a bad
    --limit is a usage error."""
    add_endpoint(conn, "mail", "http://127.0.0.1:9/", events=("mail.*",))
    add_endpoint(conn, "audit", "http://127.0.0.1:9/")
    first = publish(conn, "mail.received", {"n": 1}, key="thread-7")
    second = publish(conn, "order.created", {"n": 2})
    third = publish(conn, "mail.sent", {"n": 3}, key="thread-7")
    conn.execute("UPDATE outbox.events SET created_at = now() - interval '3 hours' "
                 "WHERE id = %s", (first,))
    conn.commit()
    listed = outbox_cli(dsn, "events", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    shown = json.loads(listed.stdout)
    assert [e["event_id"] for e in shown] == [str(third), str(second), str(first)]
    assert set(shown[0]) == {"event_id", "type", "key", "tenant", "created_at", "deliveries"}
    assert shown[0]["deliveries"] == {"mail": "pending", "audit": "pending"}
    assert shown[1]["deliveries"] == {"audit": "pending"}
    assert _RFC3339.match(shown[0]["created_at"])
    assert shown[0]["tenant"] is None

    def ids(*options: str) -> list[str]:
        result = outbox_cli(dsn, "events", "list", "--json", *options)
        assert result.returncode == 0, result.stderr
        return [e["event_id"] for e in json.loads(result.stdout)]

    assert ids("--type", "mail.*") == [str(third), str(first)]
    assert ids("--key", "thread-7", "--since", "1h") == [str(third)]
    assert ids("--limit", "1") == [str(third)]
    text = outbox_cli(dsn, "events", "list", "--type", "order.*")
    assert text.returncode == 0, text.stderr
    assert str(second) in text.stdout
    assert "audit pending" in text.stdout
    bad = outbox_cli(dsn, "events", "list", "--limit", "0")
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
