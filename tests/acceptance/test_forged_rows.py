"""Rows forged with terminal escapes are shown by the commands, never obeyed by the terminal.

A role that may write the outbox tables (the database's superuser here, as
an administrator's mistake or an application role with too wide grants
would) stores a type, a key, an endpoint name, a disabled reason, a
last_error and an attempt's error holding escape sequences and bidi
controls. `outbox dead list`, `show`, `status` and `endpoints list`/`show`
print each such character as a visible escape (``\\x1b``, ``\\u202e``);
their ``--json`` output has them escaped by JSON itself (``\\u001b``; the
output is ASCII, so the bidi controls are escaped too), and a program
reading it gets the stored value unchanged.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

from outbox._shared.text import UNPRINTABLE
from tests.support.cli import run_outbox
from tests.support.dispatcher import add_endpoint

CLEAR = "\x1b[2J\x1b[H"  # clears the screen, cursor home
TITLE = "\x1b]0;owned\x07"  # sets the terminal's title
CSI = "\x9b31m"  # C1 control sequence introducer: red
RLO, LRM, ALM, ISOLATE = "\u202e", "\u200e", "\u061c", "\u2066"
NAME = f"hooks{RLO}sgol"


@pytest.fixture
def forged(conn: psycopg.Connection[Any]) -> uuid.UUID:
    """A dead letter, its history and its endpoint, written by hand as the superuser."""
    endpoint_id = add_endpoint(conn, NAME, "http://127.0.0.1:9/", enabled=False,
                               disabled_reason=f"off{TITLE}{ISOLATE}")
    event_id = uuid.uuid4()
    conn.execute("INSERT INTO outbox.events (id, type, key, payload) VALUES (%s, %s, %s, '{}')",
                 (event_id, f"order.{CLEAR}created{RLO}", f"k{CSI}{LRM}"))
    conn.execute(
        "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, state, attempts, "
        "last_error, last_status, finished_at) SELECT id, %s, seq, key, 'dead', 1, %s, 500, "
        "now() FROM outbox.events WHERE id = %s",
        (endpoint_id, f"HTTP 500: {CLEAR}all good{ALM}\x7f", event_id))
    conn.execute(
        "INSERT INTO outbox.attempts (delivery_id, attempt, status, reason, error) "
        "SELECT id, 1, 500, 'http_5xx', %s FROM outbox.deliveries WHERE event_id = %s",
        (f"HTTP 500: {TITLE}blink\x1b[5m{RLO}", event_id))
    conn.commit()
    return event_id


def printed(*args: str, dsn: str) -> str:
    result = run_outbox(dsn, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_human_output_shows_forged_controls_as_escapes(dsn: str, forged: uuid.UUID) -> None:
    """dead list, show, status, endpoints list and show: no control or bidi character."""
    outputs = {args: printed(*args, dsn=dsn) for args in (
        ("dead", "list"), ("show", str(forged)), ("status",), ("endpoints", "list"),
        ("endpoints", "show", NAME))}
    for args, out in outputs.items():
        unsafe = sorted({hex(ord(c)) for c in out if ord(c) in UNPRINTABLE and c != "\n"})
        assert not unsafe, (args, unsafe, out)
        assert "\\u202e" in out, (args, out)  # the endpoint's name, at least
    assert "order.\\x1b[2J\\x1b[Hcreated\\u202e" in outputs["show", str(forged)]
    assert "HTTP 500: \\x1b]0;owned\\x07blink\\x1b[5m\\u202e" in outputs["show", str(forged)]
    assert "\\x1b[2J" in outputs["dead", "list"]
    assert "off\\x1b]0;owned\\x07\\u2066" in outputs["endpoints", "show", NAME]


def test_json_output_escapes_control_characters(dsn: str, forged: uuid.UUID) -> None:
    """dead list --json and show --json: every such character escaped by JSON, values intact."""
    listed = printed("dead", "list", "--json", dsn=dsn)
    shown = printed("show", "--json", str(forged), dsn=dsn)
    for out in (listed, shown):
        assert not [c for c in out if ord(c) in UNPRINTABLE and c != "\n"], out
    assert json.loads(listed)[0]["type"] == json.loads(shown)["type"] == (
        f"order.{CLEAR}created{RLO}")
