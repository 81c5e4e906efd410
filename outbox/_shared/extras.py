"""The optional parts of the distribution: whether one is installed, and the line that adds it.

``pip install outbox-dispatcher`` brings psycopg alone: enough to publish,
to receive, and for the ``outbox`` command's database commands. The
dispatcher's own stack comes with the extra ``[dispatcher]`` and the web
view's with ``[web]``; a command that needs one and finds it missing says
which line installs it (exit 1), before it imports anything of it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

DISPATCHER = ("httpx", "httptools", "tenacity", "prometheus_client", "certifi")
"""What ``outbox-dispatcher[dispatcher]`` installs, by the modules the dispatcher imports."""

WEB = ("starlette", "jinja2", "uvicorn")
"""What ``outbox-dispatcher[web]`` installs, and the web view imports."""


def install_line(extra: str) -> str:
    """The command that installs an extra of this distribution."""
    return f"pip install 'outbox-dispatcher[{extra}]'"


def missing(command: str, extra: str, modules: Sequence[str]) -> str | None:
    """Why ``command`` cannot run here (the modules of ``extra`` it lacks, and the line that
    installs them), or None when all of them can be imported. Nothing is imported."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return f"{command} needs {', '.join(absent)}: install the extra with {install_line(extra)}"
