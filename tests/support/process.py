"""The server programs the tests start beside them (nginx, PgBouncer, Prometheus, ``outbox
web``), each on 127.0.0.1 at a port of its own, and always stop.

:class:`LocalServer` is the whole life of one whose files live in a temporary
directory of its own: started by ``with`` (or :meth:`~LocalServer.start`),
ready once its port accepts a connection (or as the program says), stopped
and its directory removed on leaving, a failed start included. A start that
fails says why with the program's log: it exited, or it was not ready by the
deadline. :func:`stop` is the one way a test's server is stopped: SIGTERM,
then SIGKILL if it overstays its grace, so that none outlives its test.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from outbox.testing import free_port


def stop(process: subprocess.Popen[Any] | None, *, grace: float = 10.0) -> int | None:
    """SIGTERM to ``process`` unless it has exited, then SIGKILL after ``grace`` seconds;
    its exit code (None for no process)."""
    if process is None:
        return None
    if process.poll() is None:
        process.terminate()
    try:
        return process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


class LocalServer:
    """One program listening on 127.0.0.1:``port``, its files (and its log, ``log_name``)
    in ``directory``. A subclass writes its files and names its command in
    :meth:`command`, and may say when it is ready in :meth:`ready`."""

    name = "server"
    """The program, as the messages name it."""
    log_name = "server.log"
    """Its log file in ``directory``."""
    output_is_log = False
    """True: its standard output and error are the log (else it writes the file itself)."""
    start_seconds = 15.0
    stop_seconds = 10.0

    def __init__(self) -> None:
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix=f"outbox-{self.name}-"))
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """Its files written in ``directory``; the command that runs it in the foreground."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether it serves: by default, once its port accepts a connection."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        return True

    def log(self) -> str:
        path = self.directory / self.log_name
        return path.read_text("utf-8", "replace") if path.exists() else ""

    def start(self) -> Self:
        command = self.command()
        if self.output_is_log:
            with (self.directory / self.log_name).open("wb") as log:
                self._process = subprocess.Popen(command, stdout=log,
                                                 stderr=subprocess.STDOUT,
                                                 cwd=self.directory)
        else:
            self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_seconds
        while not self.ready():
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} not ready within {self.start_seconds:g} s\n{self.log()}")
            time.sleep(0.05)
        return self

    def close(self) -> None:
        stop(self._process, grace=self.stop_seconds)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
