"""The dispatcher command line: bad usage exits 2 in one line; a missing schema is waited out."""

from __future__ import annotations

import subprocess
import sys

import httpx
import psycopg
import pytest

from outbox.migrate import migrate
from outbox.testing import Receiver
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, wait_until


@pytest.mark.parametrize("args", [
    ["--dsn", "not a dsn"],
    ["--concurrency", "0"],
    ["--batch-size", "many"],
    ["--retention", "forever"],
    ["--allow-network", "10.0.0.0/33/1"],
    ["--log-format", "xml"],
    ["--metrics-port", "70000"],
    ["--histograms", "per-tenant"],
])
def test_bad_usage_exits_2_with_one_line_and_no_traceback(args: list[str]) -> None:
    """Every bad option or DSN is refused before anything starts: exit 2, one line, no traceback."""
    result = subprocess.run([sys.executable, "-m", "dispatcher", *args], capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "error:" in result.stderr.strip().splitlines()[-1]


def test_bad_environment_value_exits_2() -> None:
    """An OUTBOX_* variable that does not parse is bad usage too."""
    result = subprocess.run([sys.executable, "-m", "dispatcher"], capture_output=True, text=True,
                            timeout=30, check=False,
                            env={"PATH": "/usr/bin:/bin", "OUTBOX_CONCURRENCY": "lots"})
    assert result.returncode == 2
    assert "OUTBOX_CONCURRENCY" in result.stderr


def test_unmigrated_database_is_waited_out_not_fatal(empty_dsn: str, receiver: Receiver) -> None:
    """Started before `outbox migrate`: alive, not ready, then delivers once the schema exists."""
    with Dispatcher(empty_dsn) as dispatcher:
        def unready() -> bool | None:
            try:
                return dispatcher.get("/readyz").status_code == 503 or None
            except httpx.TransportError:
                return None
        wait_until(unready, what="/readyz to answer 503", dispatcher=dispatcher)
        assert dispatcher.get("/healthz").status_code == 200
        with psycopg.connect(empty_dsn) as conn:
            migrate(conn)
            add_endpoint(conn, "rx", receiver.url)
            publish(conn, "order.created", {"n": 1})
            conn.commit()
        receiver.wait_for(1, timeout=30)
        assert "outbox migrate" in dispatcher.log()
        assert "Traceback" not in dispatcher.log()


def test_outbox_command_refuses_a_malformed_dsn_with_exit_2() -> None:
    """`outbox` treats a malformed DSN as bad usage, not as a connection failure."""
    result = subprocess.run([sys.executable, "-m", "outbox.cli", "status", "--dsn", "not a dsn"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
