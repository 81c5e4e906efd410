"""What an application loads by importing the producer: nothing of the sidecar's stack.

The bare install (``pip install outbox-dispatcher``) holds psycopg alone;
the dispatcher's packages come with the extra ``[dispatcher]``. Here, offline:
the producer loads none of them, the rule that keeps it so names them all,
and the commands that need them say how to install them when they are
hidden. tests/acceptance/test_bare_install.py installs the bare wheel for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from outbox._shared import extras

TREE = Path(__file__).resolve().parents[2]
SIDECAR = ("dispatcher", "httptools", "httpx", "prometheus_client", "tenacity", "certifi",
           "starlette", "jinja2", "uvicorn")
"""The dispatcher and what only it needs: its HTTP client, parser, metrics and retries; and
the web view's framework, templates and server."""
PROJECT = tomllib.loads((TREE / "pyproject.toml").read_text())


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


@pytest.mark.parametrize("statement", [
    f"from outbox._cli import {name}_cmd" for name in
    ("migrate", "grants", "status", "endpoints", "dead", "replay", "events", "show", "purge")])
def test_the_database_commands_load_nothing_of_the_sidecar(statement: str) -> None:
    """Each database command's module loads none of the dispatcher's packages (what it
    imports when it runs, lazily, the import rule checks)."""
    assert _loaded_after(statement) == []


def test_the_probe_sees_the_sidecar_when_it_is_loaded() -> None:
    """The check is no blind one: importing the dispatcher's sender shows up in it."""
    assert "httpx" in _loaded_after("import dispatcher.http.sender")


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(text).name) for text in requirements}


def test_the_bare_install_asks_for_psycopg_alone_and_the_extra_for_the_rest() -> None:
    """pyproject's dependencies are psycopg alone; the extra [dispatcher] is what the
    dispatcher's commands look for (extras.DISPATCHER), and [demo] and [test] bring it."""
    project = PROJECT["project"]
    assert _names(project["dependencies"]) == {"psycopg"}
    optional = project["optional-dependencies"]
    assert _names(optional["dispatcher"]) == {canonicalize_name(m) for m in extras.DISPATCHER}
    assert _names(optional["web"]) >= set(extras.WEB)
    for extra in ("demo", "test"):
        assert "outbox-dispatcher[dispatcher]" in optional[extra], extra


def test_the_layer_rule_forbids_the_producer_every_package_of_the_extra() -> None:
    """The import rule on the whole `outbox` package (the demo and the web view
    included) forbids each module of the dispatcher's extra, and another forbids it the
    dispatcher itself."""
    rules = PROJECT["tool"]["importlinter"]["contracts"]
    forbidden = [set(c["forbidden_modules"]) for c in rules
                 if c["type"] == "forbidden" and c["source_modules"] == ["outbox"]
                 and not c.get("ignore_imports")]
    assert any(found >= set(extras.DISPATCHER) for found in forbidden), forbidden
    assert any("dispatcher" in found for found in forbidden), forbidden


HIDE = "import sys\nfor name in {names!r}: sys.modules[name] = None\n"


@pytest.mark.parametrize(("run", "command"), [
    ("from dispatcher.cli import main; sys.exit(main([]))", "outbox-dispatcher"),
    ("import runpy; runpy.run_module('dispatcher', run_name='__main__')", "outbox-dispatcher"),
    ("from outbox.cli import main; sys.exit(main(['demo', '--events', '10']))",
     "outbox: outbox demo"),
])
def test_without_the_extra_the_dispatcher_says_how_to_install_it(run: str, command: str) -> None:
    """With the extra's packages hidden, `outbox-dispatcher`, `python -m dispatcher` and
    `outbox demo` print one line naming them and the install line, and exit 1."""
    hidden = ("tenacity", "httptools")
    done = subprocess.run([sys.executable, "-c", HIDE.format(names=hidden) + run],
                          capture_output=True, text=True, cwd=TREE, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"{command} needs httptools, tenacity: install the extra with "
                           "pip install 'outbox-dispatcher[dispatcher]'\n")
    assert done.stdout == ""
