"""`outbox demo` as a user runs it: a subprocess, no configuration, nothing left behind."""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.busy import busy_loops, cores

_SCRIPT = Path(sys.executable).with_name("outbox")


def _command(*args: str) -> list[str]:
    base = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "outbox.cli"]
    return [*base, *args]


@pytest.fixture
def demo_env() -> Iterator[tuple[dict[str, str], Path]]:
    """An environment without database settings, and a private TMPDIR to check for leftovers.

    The TMPDIR is world-readable so that, as root, the server user could use
    it when /dev/shm has no room.
    """
    tmp = Path(tempfile.mkdtemp(prefix="outbox-demo-test-"))
    tmp.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PG", "OUTBOX_")) and k != "DATABASE_URL"}
    env["TMPDIR"] = str(tmp)
    try:
        yield env, tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _demo(env: dict[str, str], *args: str) -> Iterator[subprocess.Popen[str]]:
    """`outbox demo ARGS` running, its output piped; killed if still running after the block."""
    proc = subprocess.Popen(_command("demo", *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _cluster_of(stdout: str) -> tuple[Path, int]:
    """The data directory and port the demo announced."""
    match = re.search(r"on 127\.0\.0\.1:(\d+) \(data in (\S+),", stdout)
    assert match, stdout
    return Path(match.group(2)), int(match.group(1))


def _processes_mentioning(*needles: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(needle in cmdline for needle in needles):
            found.append(f"{entry.name}: {cmdline}")
    return found


def _assert_nothing_left(stdout: str, tmp: Path) -> None:
    datadir, port = _cluster_of(stdout)
    deadline = time.monotonic() + 10
    while True:
        left = _processes_mentioning(str(datadir), f"@127.0.0.1:{port}/")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert left == []
    assert not datadir.exists()
    assert list(tmp.iterdir()) == []


def test_demo_delivers_everything_and_cleans_up(
        demo_env: tuple[dict[str, str], Path]) -> None:
    """`outbox demo --events 200` exits 0, 200 of 200 arrived and shipped once, nothing left."""
    env, tmp = demo_env
    result = subprocess.run(_command("demo", "--events", "200"), capture_output=True,
                            text=True, timeout=120, check=False, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "200 of 200 events arrived" in result.stdout
    assert "dead-lettered  1: the order.refund_requested event, refused with 422" in result.stdout
    assert re.search(r"rolled back\s+\d+ transactions: 0 of their events arrived",
                     result.stdout)
    assert "all in publish order" in result.stdout
    assert re.search(r"duplicates\s+\d+ deliveries arrived again and were absorbed by "
                     r"first_time; demo_shipments holds 200 shipments", result.stdout)
    assert re.search(r"signatures\s+(\d+) of \1 requests verified", result.stdout)
    assert "result: OK" in result.stdout
    assert "progress: 200/200 delivered" in result.stderr
    # One rate: the last progress line's is the summary's (to the last arrival).
    [last] = re.findall(r"^progress: 200/200 delivered, (\d+) events/s", result.stderr,
                        re.MULTILINE)[-1:]
    assert re.search(rf"delivered/s\s+{last} events a second", result.stdout), result.stdout
    assert "Traceback" not in result.stderr
    _assert_nothing_left(result.stdout, tmp)


def test_demo_keep_leaves_the_cluster_until_interrupted(
        demo_env: tuple[dict[str, str], Path]) -> None:
    """--keep: after the summary, the commands it prints work on the cluster (the dead
    letter included); Ctrl-C then removes everything and the exit code is the summary's."""
    env, tmp = demo_env
    with _demo(env, "--events", "50", "--keep") as proc:
        assert proc.stdout is not None
        out = ""
        deadline = time.monotonic() + 120
        while "Ctrl-C here removes everything" not in out:
            assert time.monotonic() < deadline, out
            assert proc.poll() is None, out
            out += proc.stdout.readline()
        dsn = re.search(r"export OUTBOX_DSN='([^']+)'", out)
        shown = re.search(r"outbox show (\S+)", out)
        assert dsn, out
        assert shown, out
        looked = {**env, "OUTBOX_DSN": dsn.group(1)}
        status = subprocess.run(_command("status"), capture_output=True, text=True,
                                env=looked, timeout=60, check=False)
        assert status.returncode == 0, status.stderr
        assert re.search(r"^demo-receiver\s+enabled\s+\S+\s+0\s+0", status.stdout, re.M)
        dead = subprocess.run(_command("dead", "list"), capture_output=True, text=True,
                              env=looked, timeout=60, check=False)
        assert "order.refund_requested" in dead.stdout, dead
        assert "HTTP 422" in dead.stdout, dead
        story = subprocess.run(_command("show", shown.group(1)), capture_output=True,
                               text=True, env=looked, timeout=60, check=False)
        assert story.returncode == 0, story
        assert "dead" in story.stdout, story
        proc.send_signal(signal.SIGINT)
        rest, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "result: OK" in out
    assert "stopped and removed" in stderr
    assert "Traceback" not in stderr
    _assert_nothing_left(out + rest, tmp)


@pytest.mark.parametrize("value", ["0", "abc", "1000001", "-5"])
def test_demo_refuses_a_bad_event_count(value: str) -> None:
    """`--events` outside 1..1000000 or not a number is exit 2 with a one-line message."""
    result = subprocess.run(_command("demo", "--events", value), capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "--events" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def _read_until_progress(proc: subprocess.Popen[str], timeout: float) -> str:
    """Stderr read up to the first progress line (the demo is publishing by then)."""
    assert proc.stderr is not None
    seen = ""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while "progress:" not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no progress line in {timeout} s: {seen}"
            if selector.select(remaining):
                line = proc.stderr.readline()
                assert line, f"the demo ended before showing progress: {seen}"
                seen += line
    return seen


def test_demo_interrupted_exits_nonzero_and_cleans_up(
        demo_env: tuple[dict[str, str], Path]) -> None:
    """SIGINT while the demo runs: it exits non-zero promptly and removes everything."""
    env, tmp = demo_env
    with _demo(env, "--events", "100000") as proc:
        _read_until_progress(proc, timeout=90)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "Traceback" not in stderr
    _assert_nothing_left(stdout, tmp)


def test_demo_finishes_on_a_machine_whose_cores_are_all_busy(
        demo_env: tuple[dict[str, str], Path]) -> None:
    """With twice as many busy loops as cores beside it, `outbox demo --events 200` still
    delivers everything and exits 0."""
    env, tmp = demo_env
    with busy_loops(2 * cores()):
        # A liveness deadline far beyond the run's worst (the give-up after a stall is
        # the cool-down and the retry awaited, and a margin: about a minute).
        result = subprocess.run(_command("demo", "--events", "200"), capture_output=True,
                                text=True, timeout=600, check=False, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "200 of 200 events arrived" in result.stdout
    assert re.search(r"circuit\s+(never opened|opened \d+ times?)", result.stdout)
    assert "result: OK" in result.stdout
    _assert_nothing_left(result.stdout, tmp)
