"""A test run stopped with SIGTERM stops its throwaway PostgreSQL and removes its directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.dispatcher import wait_until

ROOT = Path(__file__).resolve().parents[2]

INNER = '''
import os
import time
from pathlib import Path


def test_waits(cluster):
    """Reports its cluster's directory, then waits to be stopped."""
    Path(os.environ["REPORT"]).write_text(str(cluster.server.base))
    time.sleep(120)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the server runs as postgres when the tests run as root
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("OUTBOX_TEST_DSN")),
                    reason="an external server is not the run's own")
def test_sigterm_stops_the_cluster_and_removes_its_directory(tmp_path: Path) -> None:
    """pytest (what `./dev test` runs) ended by SIGTERM mid-test runs the fixtures'
    finalisers: the postmaster is gone and the data directory removed."""
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent(INNER))
    report = tmp_path / "base"
    env = {**os.environ, "REPORT": str(report)}
    env.pop("OUTBOX_TEST_DSN", None)
    with (tmp_path / "log").open("w") as log:
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-p",
             "no:cacheprovider", "--rootdir", str(tmp_path), str(inner)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: report.exists() and report.read_text(), 90,
                   what="the inner run to start its cluster")
        base = Path(report.read_text())
        pid = int((base / "data" / "postmaster.pid").read_text().split()[0])
        assert _alive(pid)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode != 0, (tmp_path / "log").read_text()
    wait_until(lambda: not _alive(pid), 10, what="the postmaster to exit")
    assert not base.exists(), (tmp_path / "log").read_text()
