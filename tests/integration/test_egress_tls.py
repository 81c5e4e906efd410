"""An endpoint's own CA bundle and client certificate, over real TLS on 127.0.0.1.

Certificates are made at test time (``tests.support.egress.Pki``); the
receivers are ``outbox.testing.Receiver`` serving HTTPS. Each test runs
HttpSender, the path production runs, and reads the attempt's result as
the dispatcher would record it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
import trustme

from dispatcher.http import tls as tls_module
from dispatcher.http.sender import HttpSender
from dispatcher.policy.model import AttemptResult, TlsFiles
from outbox.testing import Receiver, Request, Response
from tests.support.egress import Pki, server_context

T = TypeVar("T")


def run(main: Callable[[HttpSender], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        sender = HttpSender(8, False, (), "outbox-test/1")
        try:
            return await main(sender)
        finally:
            await sender.aclose()
    return asyncio.run(wrapped())


async def post(sender: HttpSender, url: str, files: TlsFiles | None) -> AttemptResult:
    return await sender.send(url, [], b"{}", 5.0, files)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def test_a_private_ca_is_refused_by_default_and_trusted_with_ca_file(pki: Pki) -> None:
    """Signed by a private CA: refused with the default bundle, delivered with --ca-file."""
    with Receiver(tls=server_context(pki)) as receiver:
        async def main(sender: HttpSender) -> tuple[AttemptResult, AttemptResult]:
            return (await post(sender, receiver.url, None),
                    await post(sender, receiver.url, TlsFiles(ca_file=pki.ca_file)))
        default, own = run(main)
    assert (default.error_kind, own.status) == ("connect", 200)
    assert "certificate verify failed" in default.error
    assert receiver.count == 1


def test_mutual_tls_presents_the_client_certificate(pki: Pki) -> None:
    """A receiver that requires a client certificate gets one only from the endpoint that
    names it; connections with and without it are never shared."""
    cert, key = pki.client_files()
    with Receiver(tls=server_context(pki, client_ca=pki.clients)) as receiver:
        async def main(sender: HttpSender) -> list[AttemptResult]:
            with_cert = TlsFiles(pki.ca_file, cert, key)
            return [await post(sender, receiver.url, with_cert),
                    await post(sender, receiver.url, TlsFiles(ca_file=pki.ca_file)),
                    await post(sender, receiver.url, with_cert)]
        first, without, again = run(main)
    assert (first.status, again.status, without.error_kind) == (200, 200, "connect")
    assert receiver.count == 2


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_a_missing_client_certificate_is_hinted_at(pki: Pki, version: ssl.TLSVersion) -> None:
    """An https endpoint without --client-cert whose server requires one fails with a hint
    naming --client-cert and --client-key, in TLS 1.3 and 1.2; with the certificate it
    is delivered, and a plain connection refused gets no such hint."""
    cert, key = pki.client_files()
    context = server_context(pki, client_ca=pki.clients)
    context.maximum_version = version
    with Receiver(tls=context) as receiver:
        async def main(sender: HttpSender) -> list[AttemptResult]:
            return [await post(sender, receiver.url, TlsFiles(ca_file=pki.ca_file)),
                    await post(sender, receiver.url, TlsFiles(pki.ca_file, cert, key))]
        without, with_cert = run(main)
    assert without.error_kind == "connect"
    assert without.error.endswith("the server may require a client certificate: give the "
                                  "endpoint --client-cert and --client-key"), without.error
    assert with_cert.status == 200
    closed = run(lambda sender: post(sender, f"https://127.0.0.1:{_closed_port()}/", None))
    assert closed.error_kind == "connect"
    assert "client certificate" not in closed.error


def test_a_reset_before_any_answer_is_hinted_at_as_a_refusal(pki: Pki) -> None:
    """A TLS 1.3 server's certificate_required alert can be overtaken by the reset of the
    request it never read: a reset after the handshake, before any byte of answer, gets
    the same hint; a reset after part of an answer does not."""
    results = [_reset_after(pki, b""), _reset_after(pki, b"HTTP/1.1 200 OK\r\n")]
    assert [r.error_kind for r in results] == ["connect", "connect"]
    assert results[0].error.startswith("connection lost without a response: "), results[0]
    assert results[0].error.endswith("give the endpoint --client-cert and --client-key")
    assert "client certificate" not in results[1].error, results[1]


def _reset_after(pki: Pki, answered: bytes) -> AttemptResult:
    """One attempt at a server that handshakes (TLS 1.3), reads the request, writes
    ``answered``, and closes with a reset (SO_LINGER 0)."""
    context = server_context(pki)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def serve() -> None:
            raw, _ = listener.accept()
            with context.wrap_socket(raw, server_side=True) as conn:
                conn.recv(65536)
                if answered:
                    conn.sendall(answered)
                    time.sleep(0.2)  # the partial answer is read before the reset
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                struct.pack("ii", 1, 0))

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        result = run(lambda sender: post(sender, f"https://127.0.0.1:{port}/",
                                         TlsFiles(ca_file=pki.ca_file)))
        server.join(10)
    return result


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(("case", "option", "why"), [
    ("missing", "ca_file", "cannot be read: No such file or directory"),
    ("garbage", "ca_file", "holds no PEM certificate"),
    ("mismatch", "client_key", "does not belong to the certificate"),
    ("expired", "client_cert", "the certificate expired at"),
    ("encrypted", "client_key", "is encrypted"),
    ("directory", "ca_file", "is not a regular file"),
])
def test_a_file_that_cannot_serve_fails_the_attempt_naming_it(
        pki: Pki, tmp_path: Path, case: str, option: str, why: str) -> None:
    """Unreadable, not PEM, mismatched, expired or encrypted: a connect failure whose text
    names the option, the path and why; nothing reaches the receiver."""
    cert, key = pki.client_files()
    files = {"ca_file": pki.ca_file, "client_cert": cert, "client_key": key}
    if case == "missing":
        files["ca_file"] = str(tmp_path / "absent.pem")
    elif case == "garbage":
        files["ca_file"] = pki.write("garbage.pem", b"not a certificate\n")
    elif case == "mismatch":
        files["client_key"] = pki.client_files("other")[1]
    elif case == "expired":
        files["client_cert"], files["client_key"] = pki.client_files("old", expired=True)
    elif case == "encrypted":
        leaf = pki.clients.issue_cert("dispatcher.test")
        files["client_cert"] = pki.write("enc.pem", leaf.cert_chain_pems[0].bytes())
        files["client_key"] = pki.write("enc.key", _encrypted(leaf.private_key_pem.bytes()))
    elif case == "directory":
        files["ca_file"] = str(tmp_path)
    with Receiver(tls=server_context(pki, client_ca=pki.clients)) as receiver:
        result = run(lambda sender: post(sender, receiver.url, TlsFiles(**files)))
    assert result.error_kind == "connect"
    assert result.error.startswith(f"{option} {files[option]}: "), result.error
    assert why in result.error
    assert receiver.count == 0


def test_files_replaced_while_running_are_read_again(pki: Pki, monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """Rotation: a client certificate the receiver does not trust, replaced by one it does
    (a new file renamed over the old), is used by the next new connection."""
    monkeypatch.setattr(tls_module, "RECHECK_SECONDS", 0.0)
    cert, key = pki.client_files(ca=trustme.CA())  # signed by a CA the receiver ignores
    files = TlsFiles(pki.ca_file, cert, key)

    def close_each(_: Request) -> Response:
        return Response(headers={"connection": "close"})
    with Receiver(close_each, tls=server_context(pki, client_ca=pki.clients)) as receiver:
        async def main(sender: HttpSender) -> tuple[AttemptResult, AttemptResult]:
            before = await post(sender, receiver.url, files)
            pki.client_files()  # the same paths, now signed by the CA the receiver trusts
            return before, await post(sender, receiver.url, files)
        before, after = run(main)
    assert (before.error_kind, after.status) == ("connect", 200)


def test_an_unusable_set_fails_alone_and_is_reported(pki: Pki, tmp_path: Path) -> None:
    """One endpoint's broken file fails its attempts only; the transport reports that set."""
    broken = TlsFiles(ca_file=str(tmp_path / "absent.pem"))
    with Receiver(tls=server_context(pki)) as receiver:
        async def main(sender: HttpSender) -> tuple[list[AttemptResult], dict[TlsFiles, str]]:
            results = [await post(sender, receiver.url, broken),
                       await post(sender, receiver.url, TlsFiles(ca_file=pki.ca_file))]
            return results, sender.transport.tls.problems()
        (bad, good), problems = run(main)
    assert (bad.error_kind, good.status) == ("connect", 200)
    assert list(problems) == [broken]
    assert problems[broken].startswith(f"ca_file {broken.ca_file}: cannot be read")


def test_one_context_per_set_shared_by_its_connections(pki: Pki) -> None:
    """Two connections (and two endpoints) naming the same files share one context."""
    files = TlsFiles(ca_file=pki.ca_file)

    async def main(sender: HttpSender) -> bool:
        contexts = sender.transport.tls
        return contexts.context(files) is contexts.context(TlsFiles(ca_file=pki.ca_file))
    assert run(main)


def _encrypted(key_pem: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(b"secret"))
