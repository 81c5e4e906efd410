"""The HTTP transport against hand-written servers on 127.0.0.1: pooling, framing, TLS, SSRF.

HttpSender's own behaviour over this transport is in test_http_sender.py;
these tests drive ``H1Transport.post`` (the path production runs) directly,
with requests encoded as HttpSender encodes them, for what only a transport
can show: which connection carried which request.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from dispatcher.http.netguard import NetworkPolicy
from dispatcher.http.resolve import AddrInfo
from dispatcher.http.sender import HttpSender
from dispatcher.http.transport import BlockedAddress, H1Transport, PoolKey
from tests.support.raw_http import (
    OK,
    answering,
    fake_dns,
    make_ca_and_cert,
    raw_server,
    read_request,
    run,
)

WHOLE = 64 << 20  # a limit no answer here reaches: ``post`` reads each body to its end


def encoded(url: str, body: bytes) -> tuple[PoolKey, bytes]:
    """The pool key of ``url`` and a POST of ``body`` to it, as bytes."""
    parsed = httpx.URL(url)
    key = PoolKey(parsed.scheme, parsed.raw_host.decode("ascii"),
                  parsed.port or (443 if parsed.scheme == "https" else 80))
    head = b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\n\r\n" % (
        parsed.raw_path, parsed.netloc, len(body))
    return key, head + body


async def post(transport: H1Transport, url: str, body: bytes = b"{}") -> tuple[int, bytes]:
    """One POST through the transport; status and the whole body."""
    key, payload = encoded(url, body)
    status, _, answer, _, _ = await transport.post(key, payload, WHOLE)
    return status, answer


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    """Poll ``condition`` every 10 ms until it holds, failing after ``seconds``."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# -- framing and keep-alive --------------------------------------------------------

@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nabcde",
], ids=["chunked", "100-continue"])
def test_chunked_and_interim_answers_are_read_and_the_connection_reused(answer: bytes) -> None:
    """A chunked body, or a 100 Continue before the answer: read whole, then one connection."""
    async def main() -> None:
        transport = H1Transport()
        async with raw_server(answering(answer)) as server:
            assert [await post(transport, server.url) for _ in range(3)] == [(200, b"abcde")] * 3
            assert [len(c) for c in server.connections] == [3]
        await transport.aclose()
    run(main)


def test_body_until_close_is_read_and_the_connection_not_reused() -> None:
    """An answer without length ends with the connection; the next request opens a new one."""
    async def main() -> None:
        transport = H1Transport()
        async with raw_server(answering(b"HTTP/1.1 200 OK\r\n\r\nto the end",
                                        close_after=True)) as server:
            assert await post(transport, server.url) == (200, b"to the end")
            assert await post(transport, server.url) == (200, b"to the end")
            assert len(server.connections) == 2
        await transport.aclose()
    run(main)


def test_large_bodies_stream_through_and_the_connection_is_reused() -> None:
    """3 MiB bodies (past the read pause threshold) arrive intact over one connection."""
    big = bytes(range(256)) * (3 * 4096)
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(big), big)

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(answering(answer)) as server:
            assert [await post(transport, server.url) for _ in range(2)] == [(200, big)] * 2
            assert [len(c) for c in server.connections] == [2]
        await transport.aclose()
    run(main)


def test_an_answer_past_the_limit_is_cut_and_its_connection_closed() -> None:
    """Of a 1 MiB body ``post`` returns ``limit`` bytes and closes the connection, undrained."""
    answer = b"HTTP/1.1 500 Oops\r\ncontent-length: %d\r\n\r\n%s" % (1 << 20, b"e" * (1 << 20))

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(answering(answer)) as server:
            for _ in range(2):
                key, payload = encoded(server.url, b"{}")
                status, headers, body, _, _ = await transport.post(key, payload, 10)
                assert (status, headers, body) == (500, [(b"content-length", b"1048576")],
                                                   b"e" * 10)
            assert [len(c) for c in server.connections] == [1, 1]
        await transport.aclose()
    run(main)


def test_idle_connection_closed_by_the_server_is_not_reused() -> None:
    """The server hanging up an idle connection costs nothing: the next POST goes on a new one."""
    async def main() -> None:
        transport = H1Transport()
        async with raw_server(answering(OK, close_after=True)) as server:
            assert await post(transport, server.url) == (200, b"ok")
            await until(lambda: transport.idle_connections() == 0)
            assert await post(transport, server.url) == (200, b"ok")
            assert [len(c) for c in server.connections] == [1, 1]
        await transport.aclose()
    run(main)


def test_write_refused_on_a_reset_idle_connection_goes_once_on_a_new_one() -> None:
    """A reused connection reset before our write (nothing sent) is replaced, not an error."""
    opened = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        nonlocal opened
        opened += 1
        first = opened == 1
        while True:
            await read_request(reader, heads)
            writer.write(OK)
            await writer.drain()
            if first:  # close the first connection with RST right after its answer
                writer.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(handler) as server:
            assert await post(transport, server.url) == (200, b"ok")
            # No await in between: the reset is in the kernel, not yet seen by the loop.
            assert await post(transport, server.url) == (200, b"ok")
            assert [len(c) for c in server.connections] == [1, 1]
        await transport.aclose()
    run(main)


def test_reused_connection_closed_before_answering_is_resent_once_on_a_new_one() -> None:
    """A reused connection that ends before a byte of the answer: once more, on a new one."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        while True:
            await read_request(reader, heads)
            if len(heads) == 2:
                return  # the second request on a connection: hang up without an answer
            writer.write(OK)
            await writer.drain()

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(handler) as server:
            assert await post(transport, server.url) == (200, b"ok")
            key, payload = encoded(server.url, b"{}")
            status, _, _, _, resent = await transport.post(key, payload, WHOLE)
            assert (status, resent) == (200, True)
            assert [len(c) for c in server.connections] == [2, 1]
        await transport.aclose()
    run(main)


def test_request_is_never_sent_twice_once_the_answer_began_or_on_a_new_connection() -> None:
    """No resend of a request that went on a new connection, nor once the answer began."""
    opened = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        nonlocal opened
        opened += 1
        await read_request(reader, heads)
        if opened == 1:
            return  # a new connection's request, unanswered
        writer.write(OK)
        await writer.drain()
        await read_request(reader, heads)
        writer.write(b"HTTP/1.1 200 O")  # the answer begins, and the server hangs up

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(handler) as server:
            with pytest.raises(httpx.ReadError, match="without a response"):
                await post(transport, server.url)
            assert await post(transport, server.url) == (200, b"ok")
            with pytest.raises(httpx.ReadError, match="before the response ended"):
                await post(transport, server.url)
            assert [len(c) for c in server.connections] == [1, 2]
        await transport.aclose()
    run(main)


def test_idle_connections_expire() -> None:
    """An idle connection is closed after the keep-alive expiry, without another request."""
    async def main() -> None:
        transport = H1Transport(keepalive_expiry=0.1)
        async with raw_server(answering(OK)) as server:
            assert await post(transport, server.url) == (200, b"ok")
            await until(lambda: server.closed == 1)
            assert transport.idle_connections() == 0
            assert await post(transport, server.url) == (200, b"ok")
            assert len(server.connections) == 2
        await transport.aclose()
    run(main)


@pytest.mark.parametrize(("hint", "idle", "connections"), [
    (b"timeout=1", 0.7, [1, 1]),  # let go at 0.5 s (1 s less half of it), before the server
    (b"timeout=1", 0.2, [2]),
    (b"timeout=5, max=1", 0.0, [1, 1]),  # the server takes one more at most: none from us
    (b"timeout=5, max=2", 0.0, [2]),
], ids=["timeout-passed", "timeout-not-yet", "max-1", "max-2"])
def test_the_servers_keep_alive_header_is_heeded(hint: bytes, idle: float,
                                                 connections: list[int]) -> None:
    """``Keep-Alive: timeout=N`` lets a connection go before N; ``max=1`` takes no more."""
    answer = b"HTTP/1.1 200 OK\r\nkeep-alive: %s\r\ncontent-length: 2\r\n\r\nok" % hint

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(answering(answer)) as server:
            assert await post(transport, server.url) == (200, b"ok")
            await asyncio.sleep(idle)
            assert await post(transport, server.url) == (200, b"ok")
            assert [len(c) for c in server.connections] == connections
        await transport.aclose()
    run(main)


def test_a_server_hanging_up_after_answering_gets_new_connections() -> None:
    """A server that says keep-alive and closes after each answer: each request on a new
    connection, at most the first sent twice, none lost."""
    answer = b"HTTP/1.1 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok"

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(answering(answer, close_after=True)) as server:
            resent = []
            for _ in range(20):
                key, payload = encoded(server.url, b"{}")
                status, _, _, _, again = await transport.post(key, payload, WHOLE)
                assert status == 200
                resent.append(again)
            assert sum(resent) <= 1
            assert len(server.requests) == 20
            assert [len(c) for c in server.connections if c] == [1] * 20
        await transport.aclose()
    run(main)


# -- limits, timeouts, cancellation ----------------------------------------------------

def test_pool_never_opens_more_than_max_connections() -> None:
    """Six concurrent POSTs with max_connections=2: all answered over at most two connections."""
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   heads: list[bytes]) -> None:
        while True:
            await read_request(reader, heads)
            await asyncio.sleep(0.05)
            writer.write(OK)
            await writer.drain()

    async def main() -> None:
        transport = H1Transport(max_connections=2)
        async with raw_server(slow) as server:
            results = await asyncio.gather(*(post(transport, server.url) for _ in range(6)))
            assert results == [(200, b"ok")] * 6
            assert len(server.connections) == 2
            assert len(server.requests) == 6
        await transport.aclose()
    run(main)


def test_the_attempt_deadline_bounds_a_silent_server_and_a_full_pool() -> None:
    """A silent server and the wait for a full pool both end at the attempt's deadline."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        while True:
            head = await read_request(reader, heads)
            if b"/slow" in head.split(b"\r\n", 1)[0]:
                await asyncio.sleep(30)
            writer.write(OK)
            await writer.drain()

    async def main() -> None:
        sender = HttpSender(1, False, [], "test/1")
        async with raw_server(handler) as server:
            assert (await sender.send(server.url, [], b"{}", 5.0)).status == 200
            slow = asyncio.create_task(sender.send(server.url + "slow", [], b"{}", 1.0))
            await until(lambda: len(server.requests) == 2)
            waiting = await sender.send(server.url, [], b"{}", 0.1)
            assert (waiting.status, waiting.error, len(server.requests)) == (
                None, "no complete response within 0.1 s", 2)
            silent = await slow
            assert (silent.status, silent.error) == (None, "no complete response within 1 s")
            assert (await sender.send(server.url, [], b"{}", 5.0)).status == 200
            assert len(server.connections) == 2  # the silent one closed, a new one opened
        await sender.aclose()
    run(main)


def test_cancelled_request_closes_its_connection() -> None:
    """A request cut off by a deadline closes its connection rather than pooling it."""
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     heads: list[bytes]) -> None:
        await read_request(reader, heads)
        await reader.read()  # until the client goes away

    async def main() -> None:
        transport = H1Transport()
        async with raw_server(silent) as server:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await post(transport, server.url)
            await until(lambda: server.closed == 1)
            assert transport.idle_connections() == 0
        await transport.aclose()
    run(main)


# -- the SSRF guard, through a fake resolver -------------------------------------------

def test_name_resolving_only_to_blocked_addresses_is_refused() -> None:
    """With blocking on, a name whose addresses are all internal is BlockedAddress, unsent."""
    async def main() -> None:
        resolve, _ = fake_dns("127.0.0.2", "127.0.0.1")
        transport = H1Transport(policy=NetworkPolicy.build(True), resolver=resolve)
        async with raw_server(answering(OK)) as server:
            blocked = (r"hooks.test resolves only to private or internal addresses"
                       r" \(127.0.0.1, 127.0.0.2\)")
            with pytest.raises(BlockedAddress, match=blocked):
                await post(transport, f"http://hooks.test:{server.port}/")
            assert server.connections == []
        await transport.aclose()
    run(main)


@pytest.mark.parametrize("allow", ["127.0.0.1/32", "hooks.test"])
def test_only_checked_addresses_are_dialled(allow: str) -> None:
    """An allowed CIDR lets through only its address; an allowed name lets through all of them."""
    async def main() -> None:
        resolve, asked = fake_dns("127.0.0.1")
        sender = HttpSender(4, True, [allow], "test/1", transport=H1Transport(
            policy=NetworkPolicy.build(True, [allow]), resolver=resolve))
        async with raw_server(answering(OK)) as server:
            result = await sender.send(f"http://hooks.test:{server.port}/", [], b"{}", 5.0)
            assert (result.status, result.body_excerpt) == (200, "ok")
            assert b"host: hooks.test:%d" % server.port in server.requests[0].lower()
            assert asked == ["hooks.test"]
        await sender.aclose()
    run(main)


def test_sender_reports_blocked_for_this_transport() -> None:
    """HttpSender turns this transport's BlockedAddress into error_kind "blocked"."""
    async def main() -> None:
        resolve, _ = fake_dns("10.0.0.1")
        sender = HttpSender(4, True, [], "test/1", transport=H1Transport(
            policy=NetworkPolicy.build(True), resolver=resolve))
        result = await sender.send("http://hooks.test/", [], b"{}", 5.0)
        await sender.aclose()
        assert (result.error_kind, result.status) == ("blocked", None)
    run(main)


def test_a_guarded_endpoint_is_judged_whatever_the_flags() -> None:
    """Blocking off: a guarded endpoint's name resolving inside is refused all the same
    (its connections are its own: never one opened unguarded), the same URL unguarded is
    reached; --allow-network still makes its exceptions."""
    async def main() -> None:
        resolve, _ = fake_dns("127.0.0.1")
        async with raw_server(answering(OK)) as server:
            url = f"http://hooks.test:{server.port}/"
            sender = HttpSender(4, False, [], "test/1", transport=H1Transport(
                policy=NetworkPolicy.build(False), resolver=resolve))
            assert (await sender.send(url, [], b"{}", 5.0)).status == 200
            guarded = await sender.send(url, [], b"{}", 5.0, guarded=True)
            assert (guarded.error_kind, guarded.status) == ("blocked", None)
            assert "hooks.test resolves only to private or internal addresses" in (
                guarded.error or "")
            literal = await sender.send(f"http://127.1:{server.port}/", [], b"{}", 5.0,
                                        guarded=True)
            assert literal.error_kind == "blocked"
            await sender.aclose()
            allowing = HttpSender(4, False, ["127.0.0.0/8"], "test/1", transport=H1Transport(
                policy=NetworkPolicy.build(False, ["127.0.0.0/8"]), resolver=resolve))
            assert (await allowing.send(url, [], b"{}", 5.0, guarded=True)).status == 200
            await allowing.aclose()
            assert len(server.requests) == 2
    run(main)


@pytest.fixture
def unanswering_address() -> Iterator[tuple[str, int]]:
    """A loopback address whose connects hang: a listener with its accept queue full."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(address)
        fillers.append(filler)
    yield address
    for sock in [*fillers, listener]:
        sock.close()


def test_addresses_race_past_one_that_hangs_or_refuses(
        unanswering_address: tuple[str, int]) -> None:
    """Of three addresses the two dead ones (hanging, refusing) do not stop the live one."""
    refusing = ("127.0.0.1", closed_port())

    async def main() -> None:
        async with raw_server(answering(OK)) as server:
            live = ("127.0.0.1", server.port)

            async def resolve(host: str, port: int) -> list[AddrInfo]:
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a)
                        for a in (unanswering_address, refusing, live)]
            transport = H1Transport(resolver=resolve)
            async with asyncio.timeout(10):  # a hang would be a failure, not a stuck suite
                assert await post(transport, f"http://hooks.test:{server.port}/") == (200, b"ok")
            await transport.aclose()
    run(main)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- TLS with a test CA -----------------------------------------------------------------

@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_verifies_the_name_sends_sni_and_keeps_alive(tmp_path: Path) -> None:
    """Over TLS: the right name works (SNI sent, one connection); another name is refused."""
    ca, cert, key = make_ca_and_cert(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    names: list[str | None] = []

    def remember(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        names.append(name)
    server_context.sni_callback = remember
    client_context = ssl.create_default_context(cafile=str(ca))

    async def main() -> None:
        resolve, _ = fake_dns("127.0.0.1")
        transport = H1Transport(resolver=resolve, tls_context=client_context)
        async with raw_server(answering(OK), tls=server_context) as server:
            url = f"https://hooks.test:{server.port}/"
            assert [await post(transport, url) for _ in range(2)] == [(200, b"ok")] * 2
            assert ([len(c) for c in server.connections], names) == ([2], ["hooks.test"])
            with pytest.raises(httpx.ConnectError, match="certificate"):
                await post(transport, f"https://other.test:{server.port}/")
        await transport.aclose()
    run(main)
