"""HttpSender against real servers on 127.0.0.1, on the path production runs.

Every request goes to loopback: the blocking tests point at the receiver and
must be refused before any connection; the allow-list tests let 127.0.0.1
through to it. Errors no server can cause come from a transport whose
``post`` raises them (``Failing``), the one seam: everything above it is
the production code.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from dispatcher.http.sender import BODY_EXCERPT_BYTES, HttpSender
from dispatcher.http.transport import Answer, H1Transport, PoolKey
from dispatcher.policy.model import AttemptResult
from outbox.testing import Receiver, Request, Response

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SIGNATURE = "v1,SIGNATURE+should+never+show+up+anywhere+in+errors="
BODY = b'{"id": "evt_1", "data": "BODY-SHOULD-NOT-LEAK"}'


def post(url: str, headers: list[tuple[str, str]] | None = None, body: bytes = BODY,
         timeout: float = 5.0, **options: Any) -> AttemptResult:
    """One attempt from a fresh sender (blocking off unless ``block=True``)."""
    async def attempt() -> AttemptResult:
        async with sender(**options) as client:
            return await client.send(url, headers or [], body, timeout)
    return asyncio.run(attempt())


@asynccontextmanager
async def sender(block: bool = False, allow: tuple[str, ...] = (),
                 **options: Any) -> AsyncIterator[HttpSender]:
    client = HttpSender(8, block, allow, "outbox-test/1", **options)
    try:
        yield client
    finally:
        await client.aclose()


@asynccontextmanager
async def raw_server(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A hand-written HTTP server on 127.0.0.1 for answers the Receiver will not give."""
    tasks: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # our own shutdown below; ending normally keeps asyncio 3.11 quiet
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":", 1)[1]))
    return head


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def no_secrets(result: AttemptResult) -> None:
    assert SIGNATURE not in result.error
    assert "BODY-SHOULD-NOT-LEAK" not in result.error


# -- answers from a real server ----------------------------------------------

def test_2xx_returns_status_lowercased_headers_and_body(receiver: Receiver) -> None:
    """A 2xx gives its status, lower-cased response headers, the body and a duration."""
    receiver.responder = lambda _: Response(
        201, {"X-Request-Id": "abc-1", "Content-Type": "text/plain"}, b"created")
    result = post(receiver.url)
    assert (result.status, result.error_kind, result.body_excerpt) == (201, None, "created")
    assert result.headers["x-request-id"] == "abc-1"
    assert result.headers["content-type"] == "text/plain"
    assert result.duration > 0


def test_request_headers_and_body_arrive_as_given(receiver: Receiver) -> None:
    """The POST carries our headers and the body byte for byte, plus our user agent."""
    body = '{"note": "été ✓"}'.encode()
    post(receiver.url + "hooks/in?x=1", [("Content-Type", "application/json"),
                                         ("webhook-signature", SIGNATURE),
                                         ("X-Tenant", "acme")], body)
    [request] = receiver.wait_for(1)
    assert (request.method, request.path, request.body) == ("POST", "/hooks/in?x=1", body)
    assert request.header("content-type") == "application/json"
    assert request.header("webhook-signature") == SIGNATURE
    assert request.header("x-tenant") == "acme"
    assert request.header("user-agent") == "outbox-test/1"
    assert request.header("content-length") == str(len(body))


def test_repeated_headers_are_all_sent_and_defaults_yield_to_given_ones() -> None:
    """Two headers of one name both go out; a given user-agent replaces ours."""
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await read_request(reader))
        writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    async def main() -> AttemptResult:
        async with raw_server(handler) as url, sender() as client:
            return await client.send(url, [("x-tag", "one"), ("x-tag", "two"),
                                           ("User-Agent", "custom/2")], b"", 5.0)
    assert asyncio.run(main()).status == 204
    lines = heads[0].decode().lower().split("\r\n")
    assert "x-tag: one" in lines
    assert "x-tag: two" in lines
    assert [line for line in lines if line.startswith("user-agent")] == ["user-agent: custom/2"]


def test_503_returns_retry_after(receiver: Receiver) -> None:
    """A 503 is a result, not an error, and its Retry-After header comes back."""
    receiver.responder = lambda _: Response(503, {"Retry-After": "120"}, b"busy")
    result = post(receiver.url)
    assert (result.status, result.error_kind) == (503, None)
    assert result.headers["retry-after"] == "120"
    assert result.body_excerpt == "busy"


def test_redirect_is_not_followed(receiver: Receiver) -> None:
    """A 302 comes back as 302; its Location gets no request."""
    def answer(request: Request) -> Response:
        if request.path == "/":
            return Response(302, {"Location": receiver.url + "elsewhere"})
        return Response(200)
    receiver.responder = answer
    result = post(receiver.url)
    assert result.status == 302
    assert result.headers["location"].endswith("/elsewhere")
    assert [r.path for r in receiver.snapshot()] == ["/"]


def test_huge_response_body_is_capped_and_the_pool_recovers(receiver: Receiver) -> None:
    """Of an 8 MiB answer only the first 4 KiB are kept; the next request still works."""
    receiver.responder = lambda r: Response(
        500 if r.path == "/big" else 200, body=b"e" * (8 << 20) if r.path == "/big" else b"ok")

    async def main() -> tuple[AttemptResult, AttemptResult]:
        async with sender() as client:
            big = await client.send(receiver.url + "big", [], b"{}", 10.0)
            return big, await client.send(receiver.url, [], b"{}", 10.0)
    big, after = asyncio.run(main())
    assert big.status == 500
    assert big.body_excerpt == "e" * BODY_EXCERPT_BYTES
    assert (after.status, after.body_excerpt) == (200, "ok")


def test_connections_are_kept_alive() -> None:
    """Sequential attempts to one server reuse one connection."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    async def main() -> list[int | None]:
        async with raw_server(handler) as url, sender() as client:
            return [(await client.send(url, [], b"{}", 5.0)).status for _ in range(3)]
    assert asyncio.run(main()) == [200, 200, 200]
    assert connections == 1


def test_proxy_variables_in_the_environment_are_ignored(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY and friends pointing at a dead port do not divert the request."""
    dead = f"http://127.0.0.1:{closed_port()}"
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert post(receiver.url).status == 200
    assert receiver.count == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_is_verified_whatever_the_environment_trusts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A self-signed certificate is refused ("connect"), even when SSL_CERT_FILE names it."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    served = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await read_request(reader)
        served += 1

    async def main() -> AttemptResult:
        async with raw_server(handler, tls=context) as url, sender() as client:
            return await client.send(url, [], BODY, 5.0)
    result = asyncio.run(main())
    assert (result.status, result.error_kind) == (None, "connect")
    assert "certificate" in result.error.lower()
    assert served == 0


# -- failures from a real server -----------------------------------------------

@pytest.mark.parametrize("drip", [True, False], ids=["slow-drip", "silent"])
def test_deadline_cuts_off_a_dripping_or_silent_server(drip: bool) -> None:
    """A server dripping a byte per 0.2 s (or never answering) hits the total deadline."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if drip:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
        for _ in range(100000):
            if drip:
                writer.write(b"x")
                await writer.drain()
            await asyncio.sleep(0.2)

    async def main() -> AttemptResult:
        async with raw_server(handler) as url, sender() as client:
            return await client.send(url, [("webhook-signature", SIGNATURE)], BODY, 0.8)
    result = asyncio.run(main())
    assert (result.status, result.error_kind) == (None, "timeout")
    assert result.error == "no complete response within 0.8 s"


def test_connection_refused_is_connect() -> None:
    """A closed port gives error_kind "connect" with a short, secret-free text."""
    result = post(f"http://127.0.0.1:{closed_port()}/", [("webhook-signature", SIGNATURE)])
    assert (result.status, result.error_kind) == (None, "connect")
    assert "127.0.0.1" in result.error
    no_secrets(result)


@pytest.mark.parametrize(("behaviour", "kind"), [
    ("hang up", "connect"), ("reset", "connect"), ("cut body short", "connect"),
    ("garbage", "other"),
])
def test_broken_answers_map_to_error_kinds(behaviour: str, kind: str) -> None:
    """Hang-up, reset or a short body is "connect"; a malformed answer is "other"."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if behaviour == "cut body short":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
        elif behaviour == "garbage":
            writer.write(b"HELLO THERE\r\n\r\n")
        elif behaviour == "reset":  # close with RST instead of FIN
            writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await writer.drain()

    async def main() -> AttemptResult:
        async with raw_server(handler) as url, sender() as client:
            return await client.send(url, [("webhook-signature", SIGNATURE)], BODY, 5.0)
    result = asyncio.run(main())
    assert (result.status, result.error_kind) == (None, kind)
    assert result.error.startswith("malformed response") == (behaviour == "garbage")
    no_secrets(result)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "http://[::1/", "not a url"])
def test_unusable_url_is_other_not_an_exception(url: str) -> None:
    """A URL that cannot be requested is reported as "other", never raised."""
    result = post(url)
    assert (result.status, result.error_kind) == (None, "other")
    assert result.error


# -- the SSRF guard ----------------------------------------------------------------

@pytest.mark.parametrize("host", [
    "127.1", "2130706433", "0x7f000001", "017700000001", "[::1]", "[::ffff:127.0.0.1]",
    "localhost", "127.0.0.1",
])
def test_loopback_in_any_spelling_is_blocked_before_connecting(
        receiver: Receiver, host: str) -> None:
    """With blocking on, each spelling of loopback is "blocked" and nothing arrives."""
    result = post(f"http://{host}:{receiver.port}/", [("webhook-signature", SIGNATURE)],
                  block=True)
    assert (result.status, result.error_kind) == (None, "blocked")
    assert "private or internal" in result.error
    no_secrets(result)
    assert receiver.count == 0


@pytest.mark.parametrize(("allow", "host"), [
    (("127.0.0.0/8",), "127.0.0.1"),
    (("127.0.0.1",), "localhost"),
    (("localhost",), "localhost"),
])
def test_allow_list_lets_loopback_through(receiver: Receiver, allow: tuple[str, ...],
                                          host: str) -> None:
    """An allowed CIDR or host name reaches the receiver even with blocking on."""
    result = post(f"http://{host}:{receiver.port}/", block=True, allow=allow)
    assert (result.status, result.error_kind) == (200, None)
    assert receiver.count == 1


def test_allowed_host_name_does_not_allow_its_address_literal(receiver: Receiver) -> None:
    """Allowing "localhost" does not allow http://127.0.0.1/."""
    result = post(f"http://127.0.0.1:{receiver.port}/", block=True, allow=("localhost",))
    assert result.error_kind == "blocked"
    assert receiver.count == 0


# -- errors no server causes, and what error texts leave out --------------------------

class Failing(H1Transport):
    """The production transport with ``post`` raising ``failure``: the network never used."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.failure = failure
        self.keys: list[PoolKey] = []

    async def post(self, key: PoolKey, payload: bytes, limit: int,
                   body: bytes = b"") -> Answer:
        self.keys.append(key)
        raise self.failure


@pytest.mark.parametrize(("failure", "kind"), [
    (httpx.RemoteProtocolError("illegal status line"), "other"),
    (httpx.ConnectTimeout("connect timed out"), "timeout"),
    (httpx.ConnectError("name resolution failed"), "connect"),
    (httpx.ReadError("connection reset"), "connect"),
    (RuntimeError("unexpected"), "other"),
])
def test_transport_errors_map_to_error_kinds(failure: Exception, kind: str) -> None:
    """Each transport error becomes its error_kind, with the error's own text."""
    transport = Failing(failure)
    result = post("https://h.test/", [("webhook-signature", SIGNATURE)], transport=transport)
    assert (result.status, result.error_kind, result.error) == (None, kind, str(failure))
    assert transport.keys == [PoolKey("https", "h.test", 443)]


def test_read_error_mid_body_is_connect() -> None:
    """A connection reset while the body arrives is "connect", whatever came before."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        writer.get_extra_info("socket").setsockopt(  # close with RST instead of FIN
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    async def main() -> AttemptResult:
        async with raw_server(handler) as url, sender() as client:
            return await client.send(url, [("webhook-signature", SIGNATURE)], BODY, 5.0)
    result = asyncio.run(main())
    assert (result.status, result.error_kind) == (None, "connect")
    assert "connection" in result.error
    no_secrets(result)


def test_error_text_hides_the_url_query() -> None:
    """A transport error quoting the URL does not repeat its query token."""
    url = "https://h.test/in?token=t0ps3cret"
    result = post(url, [("webhook-signature", SIGNATURE)],
                  transport=Failing(httpx.ConnectError(f"cannot reach {url}")))
    assert result.error_kind == "connect"
    assert "h.test/in" in result.error
    for secret in ("t0ps3cret", SIGNATURE):
        assert secret not in result.error


@pytest.mark.parametrize("userinfo", ["bob:hunter2@", "user@"])
def test_url_with_credentials_is_not_sent_and_never_shown(
        receiver: Receiver, userinfo: str) -> None:
    """A URL with user:password@ fails as "other", unsent, its text free of them and the query."""
    url = f"http://{userinfo}127.0.0.1:{receiver.port}/in?token=t0ps3cret"
    for block in (False, True):
        result = post(url, [("webhook-signature", SIGNATURE)], block=block)
        assert (result.status, result.error_kind) == (None, "other")
        assert f"127.0.0.1:{receiver.port}/in" in result.error
        assert "user name or password" in result.error
        for secret in ("hunter2", "bob", "user@", "t0ps3cret"):
            assert secret not in result.error
        no_secrets(result)
    assert receiver.count == 0


def test_the_request_bytes_carry_each_header_once() -> None:
    """The head has every header once (a given user-agent replacing ours), content-length last."""
    requests: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        requests.append(head + await reader.readexactly(2))
        writer.write(b"HTTP/1.1 204 No Content\r\nX-Seen: yes\r\n\r\n")
        await writer.drain()

    async def main() -> tuple[AttemptResult, str]:
        async with raw_server(handler) as url, sender() as client:
            return await client.send(url + "in?x=1",
                                     [("webhook-id", "msg_1"), ("user-agent", "custom/1")],
                                     b"{}", 5.0), url
    result, url = asyncio.run(main())
    assert (result.status, result.headers) == (204, {"x-seen": "yes"})
    head, _, body = requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /in?x=1 HTTP/1.1"
    assert lines[1] == b"host: " + url.split("/")[2].encode()
    names = [line.split(b":")[0] for line in lines[1:]]
    assert len(names) == len(set(names))
    assert b"user-agent: custom/1" in lines
    assert b"webhook-id: msg_1" in lines
    assert lines[-1] == b"content-length: 2"
    assert body == b"{}"


def test_a_header_with_a_line_break_is_refused_before_sending() -> None:
    """A CR or LF in a value cannot smuggle a header in: the attempt fails, nothing is sent."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)

    async def main() -> list[AttemptResult]:
        async with raw_server(handler) as url, sender() as client:
            return [await client.send(url, [("x-a", value)], b"{}", 5.0)
                    for value in ("1\r\nx-b: 2", "1\nx-b: 2", "1\rx-b: 2")]
    for result in asyncio.run(main()):
        assert (result.status, result.error_kind) == (None, "other")
        assert "CR or LF" in result.error
    assert connections == 0
