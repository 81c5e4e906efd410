"""Requests through a real forward proxy on 127.0.0.1: tunnels, absolute form, NO_PROXY.

The proxy (``tests.support.egress.ForwardProxy``) counts what it carried;
the receivers are ``outbox.testing.Receiver``, over HTTPS signed by a
private CA where a tunnel is tested, so TLS runs end to end inside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dispatcher.http.proxy import ProxyRoutes
from dispatcher.http.sender import HttpSender
from dispatcher.policy.model import AttemptResult, TlsFiles
from outbox.testing import Receiver
from tests.support.egress import ForwardProxy, Pki, server_context

T = TypeVar("T")


def run(main: Callable[[HttpSender], Awaitable[T]], *, https: str = "", http: str = "",
        no_proxy: str = "", **options: Any) -> T:
    async def wrapped() -> T:
        sender = HttpSender(8, options.pop("block", False), options.pop("allow", ()),
                            "outbox-test/1",
                            proxies=ProxyRoutes.from_settings(https, http, no_proxy))
        try:
            return await main(sender)
        finally:
            await sender.aclose()
    return asyncio.run(wrapped())


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def test_https_goes_through_one_kept_tunnel_with_the_endpoints_own_tls(pki: Pki) -> None:
    """CONNECT once, then TLS to the endpoint inside (its private CA, its client
    certificate), and the tunnel kept alive for the next requests."""
    cert, key = pki.client_files()
    files = TlsFiles(pki.ca_file, cert, key)
    with ForwardProxy() as proxy, \
            Receiver(tls=server_context(pki, client_ca=pki.clients)) as receiver:
        async def main(sender: HttpSender) -> list[AttemptResult]:
            return [await sender.send(receiver.url, [], b"{}", 5.0, files) for _ in range(3)]
        results = run(main, https=proxy.url)
    assert [r.status for r in results] == [200] * 3
    assert (proxy.connections, proxy.tunnels, receiver.count) == (1, 1, 3)


def test_http_goes_in_absolute_form_on_a_kept_connection(receiver: Receiver) -> None:
    """An http:// endpoint's requests reach the proxy as absolute-form requests, the
    connection to the proxy kept alive between them."""
    with ForwardProxy() as proxy:
        async def main(sender: HttpSender) -> list[AttemptResult]:
            return [await sender.send(receiver.url + "hook?x=1", [], b"{}", 5.0)
                    for _ in range(3)]
        results = run(main, http=proxy.url)
    assert [r.status for r in results] == [200] * 3
    assert (proxy.connections, proxy.forwarded, proxy.tunnels) == (1, 3, 0)
    assert [r.path for r in receiver.snapshot()] == ["/hook?x=1"] * 3


@pytest.mark.parametrize(("no_proxy", "direct"), [
    ("127.0.0.1", True), ("127.0.0.0/8", True), ("*", True), ("localhost", False),
    ("127.0.0.1:1", False), ("10.0.0.0/8", False),
])
def test_no_proxy_sends_the_hosts_it_names_direct(receiver: Receiver, no_proxy: str,
                                                  direct: bool) -> None:
    """NO_PROXY's addresses, ranges and * go direct; other hosts and ports through."""
    with ForwardProxy() as proxy:
        result = run(lambda sender: sender.send(receiver.url, [], b"{}", 5.0),
                     http=proxy.url, no_proxy=no_proxy)
    assert result.status == 200
    assert proxy.forwarded == (0 if direct else 1)


def test_credentials_are_sent_and_never_shown(pki: Pki) -> None:
    """user:password in the proxy's URL go as Proxy-Authorization (to the tunnel, and on
    absolute-form requests); no error text or log name shows them."""
    with ForwardProxy(credentials=("alice", "s3cr3t-pw")) as proxy, \
            Receiver(tls=server_context(pki)) as tls_receiver, Receiver() as plain:
        async def main(sender: HttpSender) -> list[AttemptResult]:
            return [await sender.send(tls_receiver.url, [], b"{}", 5.0,
                                      TlsFiles(ca_file=pki.ca_file)),
                    await sender.send(plain.url, [], b"{}", 5.0)]
        results = run(main, https=proxy.url, http=proxy.url)
        assert [r.status for r in results] == [200, 200]
        assert proxy.authorizations == ["Basic YWxpY2U6czNjcjN0LXB3"] * 2
        assert "proxy-authorization" not in plain.snapshot()[0].headers
        wrong = proxy.url.replace("s3cr3t-pw", "wrong-pw")
        refused = run(lambda sender: sender.send(tls_receiver.url, [], b"{}", 5.0,
                                                 TlsFiles(ca_file=pki.ca_file)), https=wrong)
    assert refused.error_kind == "connect"
    assert "407" in refused.error
    assert "proxy http://***@127.0.0.1:" in refused.error
    assert "wrong-pw" not in refused.error
    assert "alice" not in refused.error


def test_407_to_an_absolute_form_request_is_the_proxys_failure(receiver: Receiver) -> None:
    """A 407 answering a plain http request is a connect failure (retried), never the
    endpoint's 4xx (dead-lettered at once)."""
    with ForwardProxy(credentials=("alice", "pw")) as proxy:
        result = run(lambda sender: sender.send(receiver.url, [], b"{}", 5.0),
                     http=f"http://127.0.0.1:{proxy.port}")
    assert (result.status, result.error_kind) == (None, "connect")
    assert "proxy http://127.0.0.1:" in result.error
    assert "407" in result.error
    assert receiver.count == 0


@pytest.mark.parametrize("status", [502, 403])
def test_a_refused_tunnel_is_a_connect_failure_naming_the_proxy(pki: Pki, status: int) -> None:
    """CONNECT answered 502 (or any non-2xx): connect, the proxy and its answer named."""
    with ForwardProxy(refuse_with=status) as proxy, Receiver(tls=server_context(pki)) as rx:
        result = run(lambda sender: sender.send(rx.url, [], b"{}", 5.0,
                                                TlsFiles(ca_file=pki.ca_file)), https=proxy.url)
    assert result.error_kind == "connect"
    assert result.error.startswith(f"proxy http://127.0.0.1:{proxy.port} refused a tunnel to "
                                   f"127.0.0.1:{rx.port}: {status}")
    assert rx.count == 0


def test_a_proxy_that_is_not_there_is_a_connect_failure(receiver: Receiver) -> None:
    """Nothing listening at the proxy's address: connect, naming the proxy."""
    with ForwardProxy() as proxy:
        port = proxy.port
    result = run(lambda sender: sender.send(receiver.url, [], b"{}", 5.0),
                 http=f"http://127.0.0.1:{port}")
    assert result.error_kind == "connect"
    assert result.error.startswith(f"proxy http://127.0.0.1:{port}: cannot connect")


async def _silent(writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(30)


async def _dribble(writer: asyncio.StreamWriter) -> None:
    for byte in b"HTTP/1.1 200 Connection established\r\n\r\n":
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.1)


async def _huge(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\n" + b"x-filler: " + b"a" * 100_000 + b"\r\n\r\n")
    await writer.drain()


async def _garbage(writer: asyncio.StreamWriter) -> None:
    writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    await writer.drain()


async def _early(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\n\r\nhello before TLS")
    await writer.drain()
    await asyncio.sleep(5)


@pytest.mark.parametrize(("misbehave", "text"), [
    (_silent, "did not open a tunnel to 127.0.0.1:"),
    (_dribble, "did not open a tunnel to 127.0.0.1:"),
    (_huge, "more than 64 KiB before the head ended"),
    (_garbage, "malformed response"),
    (_early, "bytes after its answer to CONNECT"),
])
def test_a_hostile_proxy_is_bounded_like_an_endpoint(pki: Pki, misbehave: Any,
                                                     text: str) -> None:
    """Silent, dribbling, huge, garbled or early-talking: a connect failure within the
    endpoint's deadline, saying it was the proxy."""
    with ForwardProxy(misbehave=misbehave) as proxy, Receiver(tls=server_context(pki)) as rx:
        result = run(lambda sender: sender.send(rx.url, [], b"{}", 1.0,
                                                TlsFiles(ca_file=pki.ca_file)), https=proxy.url)
    assert result.error_kind == "connect"
    assert result.error.startswith(f"proxy http://127.0.0.1:{proxy.port}"), result.error
    assert text in result.error
    assert result.duration < 2.0


def test_the_guard_never_applies_to_the_proxy_and_still_to_what_it_can_see(
        receiver: Receiver) -> None:
    """--block-private-networks: the proxy (127.0.0.1 here) is dialled and a name behind it
    goes through; an address written in the URL is still judged, and so is a host NO_PROXY
    sends direct: both refused."""
    with ForwardProxy() as proxy:
        async def main(sender: HttpSender) -> list[AttemptResult]:
            return [await sender.send(f"http://{url}:{receiver.port}/", [], b"{}", 5.0)
                    for url in ("hooks.test", "127.0.0.1", "localhost")]
        through, literal, direct = run(main, http=proxy.url, no_proxy="localhost", block=True)
    assert (through.status, literal.error_kind, direct.error_kind) == (200, "blocked",
                                                                       "blocked")
    assert proxy.forwarded == 1
