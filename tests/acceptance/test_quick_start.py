"""The README's quick start, run as written: its shell block, then its Python block.

The only changes are the two the README tells the reader to make: ``OUTBOX_DSN``
names the test's fresh database (without the outbox schema, so that
``outbox migrate`` creates it) and ``--url`` names a real receiver on
127.0.0.1. Around the commands, not in them: the ``mail`` table the Python
block updates (the README says it stands for the reader's own) is created
first; the ``outbox`` and ``outbox-dispatcher`` of this interpreter's
environment come first on ``PATH``; and ``OUTBOX_METRICS_PORT=0`` is set in the
environment so that the dispatcher's metrics port cannot collide with another
test's, while its command stays as written.

One line is not executed: ``pip install 'outbox-dispatcher[binary]'``. It
would fetch the project and psycopg's binary build from a package index, which
a test run may not reach (and the project is installed already). The test
checks instead that the line names this project's distribution and an extra it
declares.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import psycopg

from outbox import receive
from outbox.testing import Receiver
from tests.support.cli import clean_environment
from tests.support.dispatcher import wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def quick_start() -> tuple[str, str]:
    """The README's "Quick start" section: its first sh block and its first python block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"^```sh\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    python = re.search(r"^```python\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert shell, "the quick start has lost its sh block"
    assert python, "the quick start has lost its python block"
    return shell.group(1), python.group(1)


def commands(block: str) -> list[str]:
    """The block's commands, a line ending in a backslash continued on the next."""
    found: list[str] = []
    pending = ""
    for line in block.splitlines():
        pending += line + "\n"
        if not line.rstrip().endswith("\\"):
            found.append(pending.rstrip("\n"))
            pending = ""
    return [c for c in found if c.strip()]


def test_the_install_line_installs_this_project() -> None:
    """The pip line (not run, see above) names this distribution and an extra it declares."""
    shell, _ = quick_start()
    line = commands(shell)[0]
    words = shlex.split(line, comments=True)
    assert words[:2] == ["pip", "install"], line
    spec = re.fullmatch(r"([\w.-]+)\[(\w+)\]", words[2])
    assert spec, words[2]
    name, extra = spec.groups()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert name == project["name"]
    assert extra in project["optional-dependencies"]


def test_quick_start_runs_as_written(empty_dsn: str, receiver: Receiver) -> None:
    """Migrate, add the endpoint, run the dispatcher, publish: the receiver gets the signed
    event, the business change committed with it, and SIGTERM stops the dispatcher with 0."""
    shell, python = quick_start()
    steps = commands(shell)
    assert steps[0].startswith("pip install"), steps[0]
    assert steps[-1].split()[0] == "outbox-dispatcher", steps[-1]
    url = f"{receiver.url}api/events"
    script = ["set -euo pipefail"]
    for step in steps[1:]:
        if step.startswith("export OUTBOX_DSN="):
            script.append(f"export OUTBOX_DSN={shlex.quote(empty_dsn)}")
        else:
            script.append(re.sub(r"--url \S+", f"--url {url}", step))
    script[-1] = "exec " + script[-1]  # so that the signal below reaches the dispatcher
    given = re.search(r"--secret (whsec_\S+)", shell)
    assert given, "the quick start's endpoint has no secret"
    secret = given.group(1)
    assert (BIN / "outbox").exists()
    assert (BIN / "outbox-dispatcher").exists()

    with psycopg.connect(empty_dsn, autocommit=True) as conn:  # the reader's own table
        conn.execute("CREATE TABLE mail (id integer PRIMARY KEY, state text NOT NULL)")
        conn.execute("INSERT INTO mail VALUES (42, 'new')")
    env = clean_environment({"OUTBOX_METRICS_PORT": "0"})
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "quick-start.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(["bash", "-c", "\n".join(script)], env=env,
                                       stdout=log, stderr=subprocess.STDOUT)
        try:
            def started() -> bool:
                assert process.poll() is None, log_path.read_text()
                return "dispatching (concurrency" in log_path.read_text()
            wait_until(started, 60, "the quick start's dispatcher to start")

            app = Path(tmp) / "app.py"
            app.write_text(python)
            subprocess.run([sys.executable, str(app)], env={**env, "OUTBOX_DSN": empty_dsn},
                           check=True, timeout=60)

            [request] = receiver.wait_for(1, timeout=30)
            [event] = receive.Verifier([secret]).verify(request.headers, request.body)
            assert request.path == "/api/events"
            assert (event.type, event.key, event.data) == (
                "mail.received", "thread-7", {"message_id": 42})
            with psycopg.connect(empty_dsn) as conn:
                assert conn.execute("SELECT state FROM mail WHERE id = 42").fetchone() == (
                    "received",)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
        assert code == 0, log_path.read_text()
