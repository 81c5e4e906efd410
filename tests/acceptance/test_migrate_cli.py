"""`outbox migrate` as a user runs it: a subprocess, exit codes, one-line errors."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import psycopg

from outbox.migrate import SCHEMA_VERSION
from tests.support.cli import run_outbox
from tests.support.releases import releases


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


def _version_2_database(dsn: str) -> None:
    release = next(r for r in releases() if r.version == 2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(release.schema_sql().encode())


def test_check_and_dry_run_change_nothing(empty_dsn: str) -> None:
    """--check exits 1 and --dry-run 0 while a step is pending; both name it, neither changes."""
    _version_2_database(empty_dsn)
    check = _outbox("migrate", "--check", "--dsn", empty_dsn)
    dry = _outbox("migrate", "--dry-run", "--dsn", empty_dsn)
    assert (check.returncode, dry.returncode) == (1, 0), check.stderr + dry.stderr
    assert "0003_inbox" in check.stdout
    assert "would run: 0003_inbox" in dry.stdout
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT max(version) FROM outbox.schema_version").fetchone() == (2,)
        assert conn.execute("SELECT to_regclass('outbox.inbox')").fetchone() == (None,)
    assert _outbox("migrate", "--dsn", empty_dsn).returncode == 0
    again = _outbox("migrate", "--check", "--dsn", empty_dsn)
    assert again.returncode == 0, again.stdout
    assert f"up to date (version {SCHEMA_VERSION})" in again.stdout


def test_blocked_step_exits_one(empty_dsn: str) -> None:
    """A step that cannot get its locks makes migrate exit 1 with one line; a rerun finishes."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(releases()[0].schema_sql().encode())
    with psycopg.connect(empty_dsn) as reader:
        reader.execute("SELECT count(*) FROM outbox.endpoints")  # held until rollback
        result = _outbox("migrate", "--dsn", empty_dsn, "--lock-timeout", "0.1",
                         "--lock-attempts", "2")
        reader.rollback()
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "0002_fleet_limits" in result.stderr
    assert "run `outbox migrate` again" in result.stderr
    rerun = _outbox("migrate", "--dsn", empty_dsn)
    assert rerun.returncode == 0, rerun.stderr
    assert f"from version 1 to {SCHEMA_VERSION}" in rerun.stdout


def test_inbox_only_database(empty_dsn: str) -> None:
    """--inbox-only: the inbox alone, judged alone by --check; other commands: outbox missing."""
    made = _outbox("migrate", "--inbox-only", "--dsn", empty_dsn)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[-1].startswith("inbox made (schema version ")
    again = _outbox("migrate", "--inbox-only", "--dsn", empty_dsn)
    assert again.stdout.splitlines()[-1].startswith("outbox schema is up to date (version ")
    for args in (("--check",), ("--check", "--inbox-only")):
        check = _outbox("migrate", *args, "--dsn", empty_dsn)
        assert check.returncode == 0, check.stdout + check.stderr
    status = _outbox("status", "--dsn", empty_dsn)
    assert status.returncode == 1
    assert "the outbox is missing" in status.stderr
    assert "Traceback" not in status.stderr


def test_commands_refuse_an_older_schema(empty_dsn: str) -> None:
    """`outbox status` on a schema older than needed exits 1 naming both versions and migrate."""
    _version_2_database(empty_dsn)
    status = _outbox("status", "--dsn", empty_dsn)
    assert status.returncode == 1
    assert "version 2" in status.stderr
    assert f"version {SCHEMA_VERSION}" in status.stderr
    assert "outbox migrate" in status.stderr


def test_migrating_as_a_superuser_warns_after_success(empty_dsn: str) -> None:
    """A superuser's migration succeeds and says on stderr to migrate as the schema's owner."""
    result = _outbox("migrate", "--dsn", empty_dsn)
    assert result.returncode == 0, result.stderr
    assert "migrated as postgres, a superuser" in result.stderr
    again = _outbox("migrate", "--dsn", empty_dsn)  # nothing to do: nothing to say
    assert again.returncode == 0
    assert again.stderr == ""
