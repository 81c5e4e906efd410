"""The dispatcher of ``outbox demo``: the real ``python -m dispatcher``, as a child process.

A child process, not a task in the demo's own event loop: the dispatcher
installs its own SIGINT/SIGTERM handlers and gets a core of its own. Its
metrics port serves to wait for ``/readyz`` before the first publish, so that
the latencies the demo reports do not include the dispatcher's start-up. It
starts in a new session, so that a Ctrl-C in the terminal reaches only the
demo, which stops the child with SIGTERM (a graceful stop) and kills it if
it has not exited within a few seconds. Its ``OUTBOX_*`` environment is
dropped: a user's ``OUTBOX_BLOCK_PRIVATE_NETWORKS=1`` must not block the
demo's receiver on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from outbox._postgres import free_port

SHUTDOWN_GRACE = 1.0
_STOP_WAIT = SHUTDOWN_GRACE + 4.0


class DispatcherProcess:
    def __init__(self, dsn: str, logfile: Path) -> None:
        self.dsn = dsn
        self.logfile = logfile
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.metrics_port = free_port()

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc else 0

    def start(self) -> None:
        # The DSN holds the throwaway cluster's password: in the environment, which
        # only this user may read, not on the command line, which everyone may.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        env["OUTBOX_DSN"] = self.dsn
        args = [sys.executable, "-m", "dispatcher",
                "--metrics-host", "127.0.0.1", "--metrics-port", str(self.metrics_port),
                "--concurrency", "64", "--poll-interval", "0.5",
                "--shutdown-grace", str(SHUTDOWN_GRACE), "--retention", "0",
                "--log-level", "WARNING"]
        self._log = self.logfile.open("wb")
        self._proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                      stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Wait until ``/readyz`` answers 200 (endpoints loaded); False if the child exited."""
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        return False

    def poll(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def stop(self) -> int | None:
        """SIGTERM, wait, SIGKILL if need be; returns the exit code (None if never started)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return proc.returncode

    def log_tail(self, lines: int = 5) -> str:
        """The last lines the dispatcher wrote, for an error message."""
        try:
            text = self.logfile.read_text("utf-8", "replace").strip()
        except OSError:
            return "(no output)"
        return " | ".join(text.splitlines()[-lines:]) or "(no output)"
