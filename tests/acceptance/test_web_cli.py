"""`outbox web` as an operator runs it: a real uvicorn on 127.0.0.1, and its refusals."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.cli import clean_environment, run_outbox
from tests.support.dispatcher import wait_until
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


@pytest.mark.parametrize("listen", ["0.0.0.0:8080", "[::]:8080", "db.example:8080"])
def test_beyond_loopback_a_password_or_a_plain_choice(dsn: str, listen: str) -> None:
    """Off loopback, neither OUTBOX_WEB_PASSWORD nor --no-password: exit 2, one line naming
    both; --no-password does not make --allow-actions acceptable there."""
    for extra in ((), ("--allow-actions", "--no-password")):
        done = run_outbox(dsn, "web", "--listen", listen, *extra)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert "OUTBOX_WEB_PASSWORD" in done.stderr
        assert "Traceback" not in done.stderr
    assert "--no-password" in run_outbox(dsn, "web", "--listen", listen).stderr


def test_no_password_beyond_loopback_is_said_at_start_and_hosts_are_checked(dsn: str) -> None:
    """--no-password on 0.0.0.0 serves without a password and says so; a request addressed
    to a name not given with --allowed-host is answered 421 and shown nothing."""
    said: list[str] = []
    with web_server(dsn, "--no-password", "--allowed-host", "outbox.example",
                    listen="0.0.0.0:0", said=said) as url, \
            httpx.Client(base_url=url, trust_env=False) as client:
        assert client.get("/").status_code == 200
        for host in ("outbox.example", "OUTBOX.example.:8080", "localhost:1", "0.0.0.0"):
            assert client.get("/", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", "outbox.example.evil", "10.1.2.3:8080", ""):
            refused = client.get("/dead?format=json", headers={"Host": host})
            assert refused.status_code == 421, host
            assert "[" not in refused.text
    assert any("--no-password" in line and "proxy" in line for line in said), said


def test_the_host_check_on_loopback_and_the_password_beyond_it(dsn: str) -> None:
    """On 127.0.0.1 a rebound name is 421 unless given with --allowed-host; on 0.0.0.0 with
    OUTBOX_WEB_PASSWORD every request needs it."""
    with web_server(dsn, "--allowed-host", "[::1]", "--allowed-host", "view.internal") as url, \
            httpx.Client(base_url=url, trust_env=False) as client:
        assert client.get("/", headers={"Host": "rebound.example"}).status_code == 421
        assert client.get("/", headers={"Host": "view.internal:80"}).status_code == 200
        assert client.get("/", headers={"Host": "[::1]:8080"}).status_code == 200
    with web_server(dsn, listen="0.0.0.0:0", env={"OUTBOX_WEB_PASSWORD": "pw"}) as url, \
            httpx.Client(base_url=url, trust_env=False) as client:
        assert client.get("/").status_code == 401
        assert client.get("/", auth=("outbox", "pw")).status_code == 200
        assert client.get("/", auth=("outbox", "pw"),
                          headers={"Host": "evil.example"}).status_code == 421


@pytest.mark.parametrize("name", ["", "host:8080", "a/b", "x y"])
def test_a_bad_allowed_host_is_a_usage_error(dsn: str, name: str) -> None:
    """--allowed-host that is not a name or an address without a port: exit 2, one line."""
    done = run_outbox(dsn, "web", "--allowed-host", name)
    assert done.returncode == 2, done.stderr
    assert "--allowed-host" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _databases_file(path: Path, entries: dict[str, str]) -> None:
    lines = ['refresh = "1s"']
    for name, dsn in entries.items():
        lines += ["[[database]]", f'name = "{name}"', f"dsn = {dsn!r}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_the_databases_file_is_read_again_at_its_refresh(dsn: str, tmp_path: Path) -> None:
    """`outbox web --databases FILE` reads the file again at its refresh: a database removed
    leaves /databases and its pages (404), one added appears and is served."""
    path = tmp_path / "databases.toml"
    _databases_file(path, {"alpha": dsn, "beta": dsn})
    with web_server(dsn, "--databases", str(path)) as url, \
            httpx.Client(base_url=url, trust_env=False, timeout=30) as client:
        def names() -> list[str]:
            shown = client.get("/databases?format=json").json()["databases"]
            return [row["database"] for row in shown]
        assert names() == ["alpha", "beta"]
        assert client.get("/?db=beta").status_code == 200
        _databases_file(path, {"alpha": dsn, "gamma": dsn})
        wait_until(lambda: names() == ["alpha", "gamma"], timeout=15,
                   what="the file read again")
        assert client.get("/?db=beta").status_code == 404
        assert client.get("/?db=gamma").status_code == 200
