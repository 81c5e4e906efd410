"""``outbox web`` as a real process: uvicorn on 127.0.0.1, a port of its own choosing.

The command is started with ``--listen 127.0.0.1:0`` and prints the address
it got on its first line; tests open that. Leaving the block stops it with
SIGTERM (it must exit 0) and attaches its log to any failure.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tests.support.cli import COMMAND, clean_environment
from tests.support.process import stop


@contextmanager
def web_server(dsn: str, *args: str, env: Mapping[str, str] | None = None,
               listen: str = "127.0.0.1:0", said: list[str] | None = None) -> Iterator[str]:
    """``outbox web ARGS`` serving the test's database; its base URL (no trailing /), on
    127.0.0.1 whatever ``listen`` binds. ``said``: filled with its standard output's lines
    once it has stopped."""
    environ = clean_environment({**(env or {}), "OUTBOX_DSN": dsn})
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as log:
        process = subprocess.Popen([*COMMAND, "web", "--listen", listen, *args],
                                   env=environ, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()  # '' if it exits; pytest-timeout bounds a hang
            if "serving http://" not in line:
                process.kill()
                log.seek(0)
                raise AssertionError(f"outbox web did not start: {line!r}\n{log.read()}")
            url = line.split("serving ", 1)[1].split()[0].rstrip("/")
            yield "http://127.0.0.1:" + url.rpartition(":")[2]
        finally:
            code = stop(process, grace=20)
            log.seek(0)
            text = log.read()
            if said is not None and process.stdout is not None:
                said += [line, *process.stdout.read().splitlines()]
        assert code == 0, f"outbox web exited {code}\n{text}"


__all__ = ["web_server"]
