"""One command-line style: each rough edge an operator hit, refused in one line or quiet.

Usage errors are one line naming the option as typed with a hint to
``--help``, exit 2; environment variables are named once; a closed pipe, a
non-UTF-8 argument, a number beyond range or a device given as a sync file
never gives a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.admin import add_endpoint, publish, set_state
from tests.support.cli import COMMAND, clean_environment, run_outbox
from tests.support.dispatcher import Dispatcher

DISPATCHER = [sys.executable, "-m", "dispatcher"]


def run(argv: list[Any], env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=clean_environment(env),
                          timeout=60, check=False)


def assert_one_line_usage(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(("argv", "words"), [
    ([*DISPATCHER, "--retention", "forever"], ("--retention", "--help")),
    ([*DISPATCHER, "--concurrency", "0"], ("--concurrency",)),
    ([*COMMAND, "purge", "--older-than", "-1d"], ("--older-than", "--older-than=", "--help")),
    ([*COMMAND, "endpoints", "add", "x", "--url", "http://a.example/", "--min-backoff", "10",
      "--max-backoff", "1"], ("--min-backoff", "--max-backoff")),
    ([*COMMAND, "dead", "list", "--limit", "99999999999999999999999"], ("--limit",)),
    ([*COMMAND, "replay", "--endpoint", "x", "--since", "99999999d"], ("--since",)),
    ([*COMMAND, "status", "--dsn", "mysql://u@db.example/app"], ("mysql://", "PostgreSQL")),
    ([*DISPATCHER, "--dsn", "mysql://u@db.example/app"], ("mysql://", "PostgreSQL")),
])
def test_usage_errors_are_one_line(argv: list[str], words: tuple[str, ...]) -> None:
    """Each refused in one line naming the option (or the DSN's scheme), exit 2."""
    assert_one_line_usage(run(argv), *words)


def test_environment_errors_name_the_variable_once() -> None:
    """OUTBOX_BLOCK_PRIVATE_NETWORKS=maybe: the variable's name appears once."""
    result = run(DISPATCHER, {"OUTBOX_BLOCK_PRIVATE_NETWORKS": "maybe",
                              "OUTBOX_DSN": "host=127.0.0.1"})
    assert_one_line_usage(result, "OUTBOX_BLOCK_PRIVATE_NETWORKS")
    assert result.stderr.count("OUTBOX_BLOCK_PRIVATE_NETWORKS") == 1


def test_unknown_outbox_variables_are_warned_about(dsn: str) -> None:
    """A misspelt OUTBOX_CONCURENCY is named at start, with the spelling meant; secrets are not."""
    with Dispatcher(dsn, env={"OUTBOX_CONCURENCY": "8", "OUTBOX_SECRET_WORKFLOW": "x"},
                    once=True) as dispatcher:
        assert dispatcher.wait(60) == 0
        log = dispatcher.log()
    assert "unknown environment variable OUTBOX_CONCURENCY ignored (did you mean " \
           "OUTBOX_CONCURRENCY?)" in log
    assert "OUTBOX_SECRET_WORKFLOW" not in log


def test_no_database_configured_says_where_to_configure_one() -> None:
    """With no --dsn, OUTBOX_DSN, DATABASE_URL or PG* set, the error names them."""
    result = run([*COMMAND, "status"], {"PGHOST": "", "HOME": "/nonexistent"})
    assert result.returncode == 1
    assert "--dsn" in result.stderr
    assert "OUTBOX_DSN" in result.stderr


@pytest.mark.parametrize("args", [("status",), ("endpoints", "list", "--json"),
                                  ("dead", "list", "--json"), ("dead", "list")])
def test_a_closed_pipe_ends_quietly(conn: psycopg.Connection[Any], dsn: str,
                                    args: tuple[str, ...]) -> None:
    """`outbox ... | true`: standard output already closed by its reader; no traceback, exit 0."""
    add_endpoint(conn, "mail")
    set_state(conn, publish(conn), "mail", "dead", error="HTTP 500", status=500)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: EPIPE every time
    try:
        result = subprocess.run([*COMMAND, *args], stdout=write_end, stderr=subprocess.PIPE,
                                text=True, env=clean_environment({"OUTBOX_DSN": dsn}),
                                timeout=60, check=False)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("args", [("status",), ("dead", "list"), ("migrate",)])
def test_a_closed_or_full_standard_output_is_one_line_and_exit_one(
        conn: psycopg.Connection[Any], dsn: str, args: tuple[str, ...]) -> None:
    """`outbox status >&-` does nothing and says so; `> /dev/full` says what failed."""
    add_endpoint(conn, "mail")
    set_state(conn, publish(conn), "mail", "dead", error="HTTP 500", status=500)
    environ = clean_environment({"OUTBOX_DSN": dsn})
    closed = subprocess.run([*COMMAND, *args], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=environ, timeout=60, check=False,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 1, closed.stderr
    assert closed.stderr.splitlines() == [
        "outbox: error: standard output is closed; nothing was done (point it at /dev/null "
        "to drop what the command prints)"]
    with open("/dev/full", "w") as full:
        result = subprocess.run([*COMMAND, *args], stdout=full, stderr=subprocess.PIPE,
                                text=True, env=environ, timeout=60, check=False)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "outbox: error: cannot write to standard output: No space left on device")
    assert "Traceback" not in result.stderr


def test_non_utf8_arguments_are_usage_errors(dsn: str) -> None:
    """An endpoint name in Latin-1 bytes: exit 2 naming the argument, no UnicodeEncodeError."""
    environ = clean_environment({"OUTBOX_DSN": dsn})
    for argv in ([*COMMAND, "endpoints", "remove", b"caf\xe9"],
                 [*DISPATCHER, "--metrics-host", b"\xff"]):
        result = subprocess.run(argv, capture_output=True, text=True, env=environ,
                                timeout=60, check=False)
        assert_one_line_usage(result, "not valid UTF-8")


@pytest.mark.parametrize("make", ["device", "directory", "large"])
def test_sync_refuses_what_is_not_a_sync_file(tmp_path: Path, make: str) -> None:
    """/dev/zero, a directory and a file of many MiB are refused before being read."""
    if make == "device":
        path = "/dev/zero"
    elif make == "directory":
        path = str(tmp_path)
    else:
        big = tmp_path / "big.toml"
        big.write_bytes(b"#" * (5 * 2**20))
        path = str(big)
    result = run_outbox("host=127.0.0.1 port=1", "endpoints", "sync", path)
    assert_one_line_usage(result, path)
