"""`outbox migrate` as a user runs it: a subprocess, exit codes, one-line errors."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import psycopg

from outbox.migrate import SCHEMA_VERSION
from tests.support.cli import run_outbox


def _outbox(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_outbox(None, *args, env=env, timeout=120)


def test_migrate_twice_exits_zero(empty_dsn: str) -> None:
    """`outbox migrate` creates the schema, and running it again exits 0 too."""
    first = _outbox("migrate", "--dsn", empty_dsn)
    assert first.returncode == 0, first.stderr
    second = _outbox("migrate", env={"OUTBOX_DSN": empty_dsn})  # the DSN from the environment
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in first.stderr + second.stderr
    with psycopg.connect(empty_dsn) as conn:
        row = conn.execute("SELECT max(version) FROM outbox.schema_version").fetchone()
    assert row == (SCHEMA_VERSION,)


def test_migrate_unreachable_database_exits_one(tmp_path: Path) -> None:
    """A database that cannot be reached is exit 1 with a one-line message and no traceback."""
    with socket.socket() as sock:  # a port that was just free: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _outbox("migrate", "--dsn", f"postgresql://nobody@127.0.0.1:{port}/nothing")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "connect" in lines[0]
