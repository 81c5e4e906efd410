"""`pip install outbox-dispatcher` without an extra: psycopg alone, and enough to publish,
receive and administer; the dispatcher says what it lacks.

The distribution is built from this tree (a wheel) and installed, with no
extra, into a virtual environment of its own, once per session: psycopg and
its own dependencies come from the package index pip is configured with (a
local one, or PyPI), as they would for an application. Everything the bare
environment runs, it runs with its own interpreter and scripts; the
dispatcher that delivers to its receiver runs from the test's environment,
as it would in its own image. Without a package index (``OUTBOX_OFFLINE=1``)
the module is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from outbox.endpoints import generate_secret
from outbox.testing import free_port
from tests.support.cli import clean_environment
from tests.support.dispatcher import wait_until

ROOT = Path(__file__).resolve().parents[2]
INSTALL_LINE = "pip install 'outbox-dispatcher[dispatcher]'"
PSYCOPG_OWN = {"typing-extensions", "tzdata"}
"""What psycopg itself depends on (tzdata only on some platforms)."""

if os.environ.get("OUTBOX_OFFLINE"):
    pytest.skip("OUTBOX_OFFLINE is set: a bare install needs psycopg from a package index",
                allow_module_level=True)


@dataclass(frozen=True)
class Bare:
    """A virtual environment holding the distribution without extras."""

    bin: Path

    @property
    def python(self) -> str:
        return str(self.bin / "python")

    def run(self, *args: str, dsn: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a script of the environment (``outbox``) or its python; any exit code."""
        env = clean_environment({"OUTBOX_DSN": dsn} if dsn else None)
        env.pop("PYTHONPATH", None)  # this tree is not on its path: only what it installed
        env["PATH"] = f"{self.bin}:{env.get('PATH', '/usr/bin:/bin')}"
        command = [str(self.bin / args[0]), *args[1:]]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd="/",
                              timeout=timeout, check=False)


@pytest.fixture(scope="session")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Bare:
    """The wheel of this tree, installed without extras in a fresh environment (no pip in
    it: this interpreter's pip installs into it)."""
    where = tmp_path_factory.mktemp("bare")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(where / "wheel"), str(ROOT)],
                   check=True, timeout=600, capture_output=True)
    (wheel,) = (where / "wheel").glob("outbox_dispatcher-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")],
                   check=True, timeout=120)
    venv_python = where / "venv" / "bin" / "python"
    subprocess.run([*pip, "--python", str(venv_python), "install", str(wheel)],
                   check=True, timeout=600, capture_output=True)
    return Bare(where / "venv" / "bin")


def test_the_bare_install_holds_psycopg_alone(bare: Bare) -> None:
    """Installed: outbox-dispatcher and psycopg, with nothing but psycopg's own dependencies."""
    done = bare.run("python", "-c", "import importlib.metadata as m, json; print(json.dumps("
                    "sorted(d.metadata['Name'].lower().replace('_', '-') "
                    "for d in m.distributions())))")
    assert done.returncode == 0, done.stderr
    names = set(json.loads(done.stdout))
    assert {"outbox-dispatcher", "psycopg"} <= names, names
    assert names - {"outbox-dispatcher", "psycopg"} <= PSYCOPG_OWN, names


@pytest.mark.parametrize("command", [("outbox-dispatcher",), ("python", "-m", "dispatcher"),
                                     ("outbox-dispatcher", "--help"), ("outbox", "demo")])
def test_without_the_extra_the_dispatcher_names_its_install_line(
        bare: Bare, command: tuple[str, ...]) -> None:
    """`outbox-dispatcher`, `python -m dispatcher` and `outbox demo` print the line that
    installs the dispatcher's extra and exit 1, without a traceback."""
    done = bare.run(*command)
    assert done.returncode == 1, done.stdout + done.stderr
    assert INSTALL_LINE in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_the_bare_install_migrates_publishes_receives_and_administers(
        bare: Bare, empty_dsn: str) -> None:
    """With the bare environment's own scripts: migrate, add an endpoint, publish in a
    transaction; the dispatcher delivers to a receiver verifying with outbox.receive; the
    inbox records the event once; every database command of `outbox` runs."""
    def outbox(*args: str) -> str:
        done = bare.run("outbox", *args, dsn=empty_dsn)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done.stdout

    outbox("migrate")
    outbox("migrate", "--check")
    secret, port = generate_secret(), free_port()
    outbox("endpoints", "add", "workflow", "--url", f"http://127.0.0.1:{port}/events",
           "--events", "mail.*", "--secret", secret)
    publish = ("import os, psycopg, outbox\n"
               "with psycopg.connect(os.environ['OUTBOX_DSN']) as conn:\n"
               "    print(outbox.publish(conn, 'mail.received', {'message_id': 42}, "
               "key='thread-7'))\n")
    done = bare.run("python", "-c", publish, dsn=empty_dsn)
    assert done.returncode == 0, done.stderr
    event_id = done.stdout.strip()
    uuid.UUID(event_id)

    with _receiving(bare, secret, port) as receiver_output:
        deliver = subprocess.run(
            [sys.executable, "-m", "dispatcher", "--once"], capture_output=True, text=True,
            env=clean_environment({"OUTBOX_DSN": empty_dsn, "OUTBOX_METRICS_PORT": "0"}),
            timeout=120, check=False)
        assert deliver.returncode == 0, deliver.stderr
        printed = wait_until(lambda: re.findall(r"^mail\.received id=\S+",
                                                receiver_output.read_text(), re.MULTILINE),
                             30, "the bare receiver to print the event")
        assert printed == [f"mail.received id={event_id}"]
        assert "refused" not in receiver_output.read_text()

    once = ("import os, sys, psycopg\nfrom outbox import receive\n"
            "with psycopg.connect(os.environ['OUTBOX_DSN']) as conn:\n"
            "    print(receive.first_time(conn, sys.argv[1]), "
            "receive.first_time(conn, sys.argv[1]))\n")
    done = bare.run("python", "-c", once, event_id, dsn=empty_dsn)
    assert done.stdout.split() == ["True", "False"], done.stderr

    assert "workflow" in outbox("status")
    assert "workflow" in outbox("endpoints", "list")
    assert event_id in outbox("events", "list")
    assert "delivered" in outbox("show", event_id)
    outbox("dead", "list")
    outbox("replay", "--endpoint", "workflow", "--event-id", event_id, "--dry-run")
    outbox("purge", "--older-than", "1h", "--dry-run")
    assert "GRANT" in outbox("grants", "--application", "app", "--dispatcher", "sidecar")


@contextmanager
def _receiving(bare: Bare, secret: str, port: int) -> Iterator[Path]:
    """docs/examples/print_receiver.py, run by the bare environment's python on ``port``:
    yields the file it prints to, then stops it."""
    log = Path(bare.bin.parent / f"receiver-{port}.log")
    env = clean_environment({"WEBHOOK_SECRET": secret})
    env.pop("PYTHONPATH", None)
    with log.open("w") as out:
        process = subprocess.Popen(
            [bare.python, str(ROOT / "docs" / "examples" / "print_receiver.py"),
             "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: "receiving on" in log.read_text() or process.poll() is not None,
                   30, "the bare receiver to listen")
        assert process.poll() is None, log.read_text()
        yield log
    finally:
        process.terminate()
        process.wait(timeout=30)
