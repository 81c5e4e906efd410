"""Egress as companies run it, end to end: the commands, and the real dispatcher process.

Receivers serve HTTPS on 127.0.0.1 with certificates of a CA made at test
time; the proxy is the tests' own forward proxy, given to the dispatcher in
``HTTPS_PROXY``. What is checked is what an operator sees: the commands'
output, the deliveries' ``last_error``, ``outbox status`` and the log.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trustme

import outbox
from outbox.testing import Receiver, Request, Response
from tests.support.cli import run_outbox
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    delivery,
    wait_for_state,
    wait_until,
)
from tests.support.egress import ForwardProxy, Pki, server_context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def endpoints(dsn: str, *args: str) -> Any:
    return run_outbox(dsn, "endpoints", *args)


def publish(dsn: str, event_type: str) -> uuid.UUID:
    with psycopg.connect(dsn) as conn:
        event_id = outbox.publish(conn, event_type, {"n": 1})
        conn.commit()
    return event_id


# -- the commands ----------------------------------------------------------------------

def test_add_stores_the_files_warns_about_what_it_cannot_read_and_goes_on(
        dsn: str, pki: Pki, tmp_path: Path) -> None:
    """Files that exist here: no warning; one that does not: a warning naming it and the
    dispatcher's filesystem, exit 0, stored all the same; list --json and show give them."""
    cert, key = pki.client_files()
    good = endpoints(dsn, "add", "partner", "--url", "https://partner.test/hooks",
                     "--ca-file", pki.ca_file, "--client-cert", cert, "--client-key", key)
    assert (good.returncode, good.stderr) == (0, "")
    absent = str(tmp_path / "mounted" / "ca.pem")
    warned = endpoints(dsn, "add", "internal", "--url", "https://internal.test/",
                       "--ca-file", absent)
    assert warned.returncode == 0, warned.stderr
    assert warned.stderr.strip() == (
        f"warning: endpoint internal: --ca-file {absent}: cannot be read: No such file or "
        "directory (here); the dispatcher reads its TLS files on its own filesystem, and "
        "only there do they count")
    listed = {e["name"]: e for e in json.loads(endpoints(dsn, "list", "--json").stdout)}
    assert (listed["partner"]["ca_file"], listed["partner"]["client_cert"],
            listed["partner"]["client_key"]) == (pki.ca_file, cert, key)
    assert (listed["internal"]["ca_file"], listed["internal"]["client_cert"]) == (absent, None)
    shown = endpoints(dsn, "show", "partner").stdout
    assert ["client", "cert", cert] in [line.split() for line in shown.splitlines()]
    os.chmod(key, 0o644)  # a Secret's default mode: said, not refused
    loose = endpoints(dsn, "update", "partner", "--client-cert", cert, "--client-key", key)
    assert loose.returncode == 0, loose.stderr
    assert f"--client-key {key}: mode 0644 lets other users read" in loose.stderr
    unset = endpoints(dsn, "update", "internal", "--unset", "ca-file")
    assert unset.stdout.strip() == "updated endpoint internal: ca_file"
    assert json.loads(endpoints(dsn, "show", "internal", "--json").stdout)["ca_file"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["--client-cert", "/etc/tls/c.pem"],
     "--client-cert and --client-key are given together"),
    (["--ca-file", "tls/ca.pem"], "--ca-file must be an absolute path"),
])
def test_files_that_cannot_be_meant_are_refused_with_exit_2(dsn: str, args: list[str],
                                                            message: str) -> None:
    """Half a pair, or a relative path: one line, exit 2, nothing written."""
    result = endpoints(dsn, "add", "x", "--url", "https://x.test/", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(endpoints(dsn, "list", "--json").stdout) == []


def test_sync_takes_the_keys_and_warns_about_a_mismatched_pair(dsn: str, pki: Pki,
                                                               tmp_path: Path) -> None:
    """TOML ca_file, client_cert, client_key; a key of another certificate is told here,
    before any delivery fails, and the sync goes on."""
    cert, _ = pki.client_files()
    _, other_key = pki.client_files("other")
    sync_file = tmp_path / "endpoints.toml"
    sync_file.write_text(f'[endpoints.partner]\nurl = "https://partner.test/"\n'
                         f'ca_file = "{pki.ca_file}"\nclient_cert = "{cert}"\n'
                         f'client_key = "{other_key}"\n')
    result = endpoints(dsn, "sync", str(sync_file))
    assert result.returncode == 0, result.stderr
    assert (f"warning: endpoint partner: client_key {other_key}: does not belong to the "
            f"certificate in {cert} (here)") in result.stderr
    [stored] = json.loads(endpoints(dsn, "list", "--json").stdout)
    assert stored["client_key"] == other_key


# -- the dispatcher --------------------------------------------------------------------

def test_private_ca_and_mutual_tls_delivered_and_a_broken_file_fails_only_its_endpoint(
        dsn: str, pki: Pki, tmp_path: Path) -> None:
    """A receiver of a private CA (refused without --ca-file), one requiring a client
    certificate, and an endpoint whose key file is missing: the first two get their
    events; the third's delivery fails, retried, its last_error naming the file, and
    outbox status and endpoints show say the dispatchers cannot use its files."""
    cert, key = pki.client_files()
    missing_key = str(tmp_path / "gone.key")
    with Receiver(tls=server_context(pki)) as private, \
            Receiver(tls=server_context(pki, client_ca=pki.clients)) as mutual, \
            psycopg.connect(dsn) as conn:
        add_endpoint(conn, "private", private.url, events=("a",), ca_file=pki.ca_file)
        add_endpoint(conn, "default", private.url, events=("b",))
        add_endpoint(conn, "mutual", mutual.url, events=("a",), ca_file=pki.ca_file,
                     client_cert=cert, client_key=key)
        add_endpoint(conn, "broken", mutual.url, events=("a",), ca_file=pki.ca_file,
                     client_cert=cert, client_key=missing_key, max_attempts=100,
                     breaker_failures=0)
        first, second = publish(dsn, "a"), publish(dsn, "b")
        with Dispatcher(dsn) as dispatcher:
            wait_for_state(conn, first, "delivered", endpoint="private", dispatcher=dispatcher)
            wait_for_state(conn, first, "delivered", endpoint="mutual", dispatcher=dispatcher)
            failed = wait_until(lambda: _failed(conn, first, "broken"), dispatcher=dispatcher,
                                what="the broken endpoint's attempt")
            default = wait_until(lambda: _failed(conn, second, "default"),
                                 dispatcher=dispatcher, what="the default trust's attempt")
            status = wait_until(lambda: _problem_line(dsn, "broken"), timeout=20,
                                dispatcher=dispatcher, what="outbox status to tell")
            shown = json.loads(endpoints(dsn, "show", "broken", "--json").stdout)
    assert failed["state"] == "pending"
    assert failed["last_error"] == (f"connection failed: client_key {missing_key}: cannot be "
                                    "read: No such file or directory")
    assert "certificate verify failed" in default["last_error"]
    assert status == (f"endpoint broken: dispatchers cannot use its TLS files: client_key "
                      f"{missing_key}: cannot be read: No such file or directory")
    assert shown["problem"] == status.removeprefix("endpoint broken: ")
    assert (private.count, mutual.count) == (1, 1)


def test_rotated_files_are_picked_up_while_the_dispatcher_runs(dsn: str, pki: Pki) -> None:
    """A client certificate the receiver does not trust fails; the same paths, replaced by
    a trusted one (a new file renamed over each), deliver without a restart."""
    cert, key = pki.client_files(ca=trustme.CA())

    def close_each(_: Request) -> Response:
        return Response(headers={"connection": "close"})
    with Receiver(close_each, tls=server_context(pki, client_ca=pki.clients)) as receiver, \
            psycopg.connect(dsn) as conn:
        add_endpoint(conn, "mutual", receiver.url, ca_file=pki.ca_file, client_cert=cert,
                     client_key=key, max_attempts=100, max_backoff_seconds=0.5)
        event = publish(dsn, "a")
        with Dispatcher(dsn) as dispatcher:
            wait_until(lambda: _failed(conn, event, "mutual"), dispatcher=dispatcher,
                       what="an attempt with the untrusted certificate")
            pki.client_files()
            wait_for_state(conn, event, "delivered", dispatcher=dispatcher)
            log = dispatcher.log()
    assert "TLS files read again after a change" in log
    assert receiver.count == 1


def test_through_a_proxy_with_credentials_masked(dsn: str, pki: Pki) -> None:
    """HTTPS_PROXY with user:password: delivered through one CONNECT tunnel, the endpoint's
    own CA inside it; the password in no log line; the SSRF guard's limit said at start."""
    with ForwardProxy(credentials=("egress", "pr0xy-pw")) as proxy, \
            Receiver(tls=server_context(pki)) as receiver, psycopg.connect(dsn) as conn:
        # One request at a time: one connection, kept alive through the tunnel. A name:
        # the guard refuses 127.0.0.1 written in a URL, proxy or not.
        add_endpoint(conn, "partner", f"https://hooks.test:{receiver.port}/",
                     ca_file=pki.ca_file, max_in_flight=1)
        events = [publish(dsn, "a") for _ in range(3)]
        with Dispatcher(dsn, "--block-private-networks", "--allow-network", "192.0.2.0/24",
                        env={"HTTPS_PROXY": proxy.url}) as dispatcher:
            for event in events:
                wait_for_state(conn, event, "delivered", dispatcher=dispatcher)
            log = dispatcher.log()
    assert (receiver.count, proxy.tunnels) == (3, 1)
    assert "pr0xy-pw" not in log
    assert f"https:// endpoints go through the proxy http://***@127.0.0.1:{proxy.port}" in log
    assert "--block-private-networks cannot see the address of an endpoint" in log


def test_a_proxy_refusing_the_tunnel_is_a_retried_connect_failure(dsn: str, pki: Pki) -> None:
    """502 from CONNECT: pending, connect, last_error naming the proxy; nothing delivered."""
    with ForwardProxy(refuse_with=502) as proxy, Receiver(tls=server_context(pki)) as rx, \
            psycopg.connect(dsn) as conn:
        add_endpoint(conn, "partner", rx.url, ca_file=pki.ca_file, max_attempts=100)
        event = publish(dsn, "a")
        with Dispatcher(dsn, env={"https_proxy": proxy.url}) as dispatcher:
            failed = wait_until(lambda: _failed(conn, event, "partner"), dispatcher=dispatcher,
                                what="an attempt through the refusing proxy")
    assert failed["state"] == "pending"
    assert failed["last_error"] == (f"connection failed: proxy http://127.0.0.1:{proxy.port} "
                                    f"refused a tunnel to 127.0.0.1:{rx.port}: 502 Refused")
    assert rx.count == 0


def test_a_proxy_the_dispatcher_cannot_use_stops_it_with_exit_2(dsn: str) -> None:
    """A SOCKS proxy in HTTPS_PROXY: one line, exit 2, before anything runs."""
    with Dispatcher(dsn, env={"HTTPS_PROXY": "socks5://127.0.0.1:1080"}) as dispatcher:
        assert dispatcher.wait() == 2
        log = dispatcher.log()
    assert "HTTPS_PROXY: a socks5:// proxy is not supported" in log
    assert "Traceback" not in log


def _failed(conn: psycopg.Connection[Any], event: uuid.UUID,
            endpoint: str) -> dict[str, Any] | None:
    """The delivery once an attempt has failed (it has a last_error), else None."""
    row = delivery(conn, event, endpoint)
    return row if row["last_error"] else None


def _problem_line(dsn: str, endpoint: str) -> str | None:
    lines = run_outbox(dsn, "status").stdout.splitlines()
    return next((line for line in lines if line.startswith(f"endpoint {endpoint}: ")), None)
