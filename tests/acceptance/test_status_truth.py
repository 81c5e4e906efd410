"""`outbox status` tells the truth: dispatchers alive or not, and what stops an endpoint."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from typing import Any

import psycopg

from outbox.testing import Receiver
from tests.support.cli import COMMAND, clean_environment, run_outbox
from tests.support.dispatcher import Dispatcher, add_endpoint, wait_until

Conn = psycopg.Connection[Any]


def status(dsn: str) -> dict[str, Any]:
    result = run_outbox(dsn, "status", "--json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_dispatchers_alive_by_their_heartbeats(conn: Conn, dsn: str) -> None:
    """None running: status says so; one running: 1; stopped gracefully: none again."""
    assert status(dsn)["dispatchers"] == 0
    assert "dispatchers alive: none" in run_outbox(dsn, "status").stdout
    with Dispatcher(dsn) as dispatcher:
        wait_until(lambda: status(dsn)["dispatchers"] == 1, 20, dispatcher=dispatcher,
                   what="a heartbeat")
        assert "dispatchers alive: 1" in run_outbox(dsn, "status").stdout
        assert dispatcher.stop() == 0
    assert status(dsn)["dispatchers"] == 0


def test_endpoint_problems_are_shown(conn: Conn, dsn: str, receiver: Receiver) -> None:
    """A secret the dispatchers cannot read, a circuit open, a pause by 410: each named."""
    add_endpoint(conn, "unsigned", receiver.url, secret="env:OUTBOX_SECRET_NOT_SET")
    add_endpoint(conn, "gone", receiver.url, enabled=False,
                 disabled_reason="410 Gone at 2026-12-01T10:00:00+00:00")
    tripped = add_endpoint(conn, "tripped", receiver.url)
    add_endpoint(conn, "fine", receiver.url)
    conn.execute("UPDATE outbox.endpoint_state SET circuit = 'open', opened_at = "
                 "'2026-12-01T09:00:00Z' WHERE endpoint_id = %s", (tripped,))
    conn.commit()
    with Dispatcher(dsn) as dispatcher:
        def reported() -> dict[str, Any] | None:
            doc = {e["name"]: e for e in status(dsn)["endpoints"]}
            return doc if doc["unsigned"]["problem"] else None
        by_name = wait_until(reported, 20, dispatcher=dispatcher, what="the secret problem")
        text = run_outbox(dsn, "status").stdout
        assert dispatcher.stop() == 0
    assert "OUTBOX_SECRET_NOT_SET" in by_name["unsigned"]["problem"]
    assert by_name["gone"]["problem"].startswith("paused by 410 Gone")
    assert by_name["tripped"]["problem"] == "circuit open since 2026-12-01T09:00:00Z"
    assert by_name["fine"]["problem"] is None
    assert "endpoint unsigned: dispatchers cannot sign" in text


def test_watch_redraws_until_interrupted(dsn: str) -> None:
    """--watch 0.2 redraws; SIGINT ends it with exit 0 and no traceback."""
    proc = subprocess.Popen([*COMMAND, "status", "--watch", "0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=clean_environment({"OUTBOX_DSN": dsn}))
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.count("unrouted events:") >= 2
    assert "Traceback" not in err
