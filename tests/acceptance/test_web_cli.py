"""`outbox web` as an operator runs it: a real uvicorn on 127.0.0.1, and its refusals."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest

from tests.support.cli import clean_environment, run_outbox
from tests.support.web_server import web_server


def test_serves_the_pages_until_sigterm(dsn: str) -> None:
    """It prints its address, answers every page there, and stops on SIGTERM with exit 0."""
    with web_server(dsn) as url, httpx.Client(base_url=url, trust_env=False) as client:
        assert client.get("/").status_code == 200
        assert client.get("/dead?format=json").json() == []
        assert client.get("/static/style.css").status_code == 200
        refused = client.post("/events/0190a5b2-0000-7000-8000-000000000000/retry")
        assert refused.status_code == 403


def test_the_password_guards_the_real_server(dsn: str) -> None:
    """OUTBOX_WEB_PASSWORD: 401 without it, 200 with user outbox and it."""
    with web_server(dsn, env={"OUTBOX_WEB_PASSWORD": "hunter2"}) as url, \
            httpx.Client(base_url=url, trust_env=False) as client:
        assert client.get("/").status_code == 401
        assert client.get("/", auth=("outbox", "hunter2")).status_code == 200


@pytest.mark.parametrize("listen", ["0.0.0.0:8080", "[::]:8080", "db.example:8080"])
def test_actions_beyond_loopback_need_the_password(dsn: str, listen: str) -> None:
    """--allow-actions on a non-loopback address without OUTBOX_WEB_PASSWORD: exit 2, one line."""
    done = run_outbox(dsn, "web", "--allow-actions", "--listen", listen)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "OUTBOX_WEB_PASSWORD" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("listen", ["8080", "127.0.0.1:http", "127.0.0.1:70000", ":8080",
                                    "[::1:8080"])
def test_a_bad_address_is_a_usage_error(dsn: str, listen: str) -> None:
    """--listen that is not HOST:PORT: exit 2, one line naming the option."""
    done = run_outbox(dsn, "web", "--listen", listen)
    assert done.returncode == 2, done.stderr
    assert "--listen" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_address_in_use_is_one_line(dsn: str) -> None:
    """A port another process holds: exit 1, saying so."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_outbox(dsn, "web", "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_database_without_the_schema_is_exit_1(empty_dsn: str) -> None:
    """It checks the database before serving: no outbox schema, exit 1 and `outbox migrate`."""
    done = run_outbox(empty_dsn, "web")
    assert done.returncode == 1
    assert "outbox migrate" in done.stderr


def test_without_the_extra_it_says_what_to_install(dsn: str) -> None:
    """Without outbox-dispatcher[web] installed: exit 1 naming the extra, no traceback."""
    hide = ("import sys; sys.modules['uvicorn'] = None; sys.modules['jinja2'] = None; "
            "from outbox.cli import main; sys.exit(main(['web']))")
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          env=clean_environment({"OUTBOX_DSN": dsn}), timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert "pip install 'outbox-dispatcher[web]'" in done.stderr
    assert "jinja2, uvicorn" in done.stderr
    assert "Traceback" not in done.stderr
