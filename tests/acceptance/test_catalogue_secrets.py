"""Fault catalogue: what the environment cannot switch on or off in the dispatcher.

TLS is verified against the certifi bundle (or an endpoint's own
``--ca-file``) only, so the variables that turn that knob in other HTTP
stacks (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``REQUESTS_CA_BUNDLE``,
``CURL_CA_BUNDLE``, ``PYTHONHTTPSVERIFY``) and ``ALL_PROXY`` (the proxy
variables read are ``HTTPS_PROXY``, ``HTTP_PROXY`` and ``NO_PROXY``:
tests/acceptance/test_egress.py) are set for a real dispatcher process
here and must change nothing. What the logs, metrics and ``last_error`` may show is checked in
``tests/integration/test_echoed_secrets.py``.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox.testing import Receiver
from tests.support.dispatcher import add_endpoint, delivery, publish, run_once
from tests.support.hostile import HostileReceiver
from tests.support.proxy import FaultProxy

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command")


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no public authority signed, and its key."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_environment_switches_neither_tls_verification_nor_all_proxy(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver, tmp_path: Path) -> None:
    """CA variables and ALL_PROXY for the dispatcher: self-signed TLS still refused, no
    proxy."""
    cert, key = _self_signed(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    with HostileReceiver(tls=server) as tls, FaultProxy(receiver.port) as proxy:
        # A client that trusts the certificate is served: refusing it is the dispatcher's doing.
        trusting = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(urllib.request.Request(tls.url, b"{}", method="POST"),
                                    context=trusting, timeout=10) as answer:
            assert answer.status == 200
        via = f"http://127.0.0.1:{proxy.port}"
        env = {"SSL_CERT_FILE": str(cert), "SSL_CERT_DIR": str(tmp_path),
               "REQUESTS_CA_BUNDLE": str(cert), "CURL_CA_BUNDLE": str(cert),
               "PYTHONHTTPSVERIFY": "0", "ALL_PROXY": via, "all_proxy": via}
        add_endpoint(conn, "tls", tls.url, events=("tls.*",), max_attempts=1)
        add_endpoint(conn, "plain", receiver.url, events=("plain.*",))
        refused = publish(conn, "tls.checked", {"n": 1})
        plain = publish(conn, "plain.sent", {"n": 2})
        code, log = run_once(dsn, env=env)
        served = len(tls.snapshot())
    assert code == 1, log  # the TLS delivery was dead-lettered
    dead = delivery(conn, refused)
    assert dead["state"] == "dead", dead
    assert "certificate" in (dead["last_error"] or "").lower(), dead
    assert served == 1, "the dispatcher got past the TLS handshake"
    assert delivery(conn, plain)["state"] == "delivered"
    assert [r.header("webhook-id") for r in receiver.snapshot()] == [str(plain)]
    assert proxy.accepted == 0, "a request went through the proxy from the environment"
