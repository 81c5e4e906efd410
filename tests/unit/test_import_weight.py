"""What an application loads by importing the producer: nothing of the sidecar's stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TREE = Path(__file__).resolve().parents[2]
SIDECAR = ("dispatcher", "httptools", "httpx", "prometheus_client", "tenacity", "starlette",
           "jinja2", "uvicorn")
"""The dispatcher and what only it needs: its HTTP client, parser, metrics and retries; and
the web view's framework, templates and server."""


def _loaded_after(statement: str) -> list[str]:
    """The modules of SIDECAR in sys.modules after ``statement``, in a fresh interpreter."""
    probe = (f"import json, sys\n{statement}\n"
             f"print(json.dumps(sorted(n for n in sys.modules "
             f"if n.partition('.')[0] in {SIDECAR!r})))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TREE), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, cwd=TREE, timeout=60, check=True)
    found: list[str] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize("statement", ["import outbox", "from outbox import receive",
                                       "from outbox.cli import build_parser; build_parser()"])
def test_the_producer_loads_nothing_of_the_sidecar(statement: str) -> None:
    """`import outbox`, `from outbox import receive` and the `outbox` command's parser load
    no dispatcher, httpx, tenacity, nor the web view's Starlette, Jinja2 or uvicorn..."""
    assert _loaded_after(statement) == []


def test_the_probe_sees_the_sidecar_when_it_is_loaded() -> None:
    """The check is no blind one: importing the dispatcher's sender shows up in it."""
    assert "httpx" in _loaded_after("import dispatcher.http.sender")
