"""The real `outbox` command run by tests, against a database they choose.

The installed console script is run when there is one (so its entry point is
tested too), else ``python -m outbox``. Settings a developer may have
exported (``PG*``, ``OUTBOX_*``, ``DATABASE_URL``) are removed from the
child's environment, so that a test sees only the database it names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

_SCRIPT = Path(sys.executable).with_name("outbox")
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "outbox"]


# A developer's proxy would carry the tests' requests to 127.0.0.1 elsewhere: those that
# test the proxy set their own.
_PROXY_VARIABLES = {"https_proxy", "http_proxy", "no_proxy", "all_proxy"}


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without database or proxy settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PG", "OUTBOX_")) and k != "DATABASE_URL"
           and k.lower() not in _PROXY_VARIABLES}
    env.update(extra or {})
    return env


def run_outbox(dsn: str | None, *args: str, env: Mapping[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``outbox ARGS``, OUTBOX_DSN set to ``dsn`` when given; any exit code is returned."""
    environ = clean_environment(env)
    if dsn is not None:
        environ["OUTBOX_DSN"] = dsn
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=environ,
                          timeout=timeout, check=False)
