"""Hostile endpoints, built for real on 127.0.0.1: each answer below once hurt the dispatcher.

Endpoints may be run by anyone, so every answer is untrusted input. Each
test runs a raw server that misbehaves in one way and checks that the
attempt ends as an ``AttemptResult`` error at once (not at its deadline),
that the misbehaviour costs no one else anything, and that a connection is
reused only when that is safe.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httptools
import pytest

from dispatcher.http.parse import MAX_HEAD_BYTES
from dispatcher.http.resolve import AddrInfo, HostResolver
from dispatcher.http.transport import H1Transport
from dispatcher.policy.model import AttemptResult
from tests.support.raw_http import (
    DEADLINE,
    HANG_GUARD,
    OK,
    Handler,
    Server,
    answering,
    fake_dns,
    make_ca_and_cert,
    raw_server,
    read_request,
    run_for,
    sender,
)


def malformed(result: AttemptResult, what: str) -> bool:
    return (result.status, result.error_kind) == (None, "other") and result.error.startswith(
        f"malformed response: {what}")


def then_stay(answer: bytes) -> Handler:
    """Answer each request with ``answer``, then keep the connection open, silent."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        await read_request(reader, heads)
        writer.write(answer)
        await writer.drain()
        await reader.read()  # until the client goes away
    return handler


# -- interim (1xx) floods ---------------------------------------------------------------

async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                heads: list[bytes]) -> None:
    """100 Continue heads, without end."""
    await read_request(reader, heads)
    while True:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)
        await writer.drain()


def test_endless_interim_responses_end_the_attempt_at_once() -> None:
    """A server sending 100 Continue heads without end fails the attempt, not at its deadline."""
    async def main() -> AttemptResult:
        async with raw_server(flood) as server, sender() as client:
            return await client.send(server.url, [], b"{}", DEADLINE)
    result = run_for(main)
    assert malformed(result, "more than 10 interim (1xx) responses")


def test_flooding_neighbour_does_not_hold_up_a_healthy_endpoint() -> None:
    """Requests to a healthy server all complete while another task talks to a flooding one."""
    async def main() -> tuple[list[AttemptResult], list[AttemptResult]]:
        async with raw_server(flood) as bad, raw_server(answering(OK)) as good, \
                sender() as client:
            async def flooded() -> list[AttemptResult]:
                return [await client.send(bad.url, [], b"{}", DEADLINE) for _ in range(20)]

            async def healthy() -> list[AttemptResult]:
                return list(await asyncio.gather(
                    *(client.send(good.url, [], b"{}", DEADLINE) for _ in range(400))))
            return await asyncio.gather(flooded(), healthy())
    flooded, healthy = run_for(main)
    assert [r.status for r in healthy] == [200] * 400
    assert all(malformed(r, "more than 10 interim") for r in flooded)


# -- heads dribbled, or too long ---------------------------------------------------------

def dribbling(answer: bytes, piece: int = 1) -> Handler:
    """Write ``answer`` ``piece`` bytes at a time, one write per event loop turn."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await read_request(reader, heads)
        for start in range(0, len(answer), piece):
            writer.write(answer[start:start + piece])
            await writer.drain()
            await asyncio.sleep(0)  # the client reads what we wrote before we write more
        await reader.read()
    return handler


def test_head_dribbled_a_byte_per_read_is_parsed_once_per_byte(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 24 KiB head sent a byte per write is read whole, each byte handed to llhttp once."""
    fed: list[int] = []

    class Counting(httptools.HttpResponseParser):
        def feed_data(self, data: Any) -> None:
            fed.append(len(data))
            super().feed_data(data)

    monkeypatch.setattr(httptools, "HttpResponseParser", Counting)
    answer = (b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"p" * 24_000 + b"\r\n"
              + b"Content-Length: 2\r\n\r\nok")

    async def main() -> AttemptResult:
        async with raw_server(dribbling(answer)) as server, sender() as client:
            return await client.send(server.url, [], b"{}", DEADLINE)
    result = run_for(main)
    assert (result.status, result.body_excerpt) == (200, "ok")
    assert sum(fed) == len(answer)  # no byte parsed twice
    assert len(fed) > len(answer) // 4  # and it did arrive in pieces


def test_head_over_64_kib_dribbled_is_refused() -> None:
    """A head that grows past 64 KiB in small reads is refused, not buffered to the deadline."""
    answer = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"p" * (MAX_HEAD_BYTES + 1000)

    async def main() -> AttemptResult:
        async with raw_server(dribbling(answer, piece=64)) as server, sender() as client:
            return await client.send(server.url, [], b"{}", DEADLINE)
    assert malformed(run_for(main), "more than 64 KiB before the head ended")


# -- leniencies that once misframed or hung ---------------------------------------------

@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,\r\n chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n 0\r\n\r\n0123456789",
], ids=["transfer-encoding", "content-length"])
def test_folded_framing_header_is_refused(answer: bytes) -> None:
    """A Transfer-Encoding or Content-Length continued on a folded line is malformed."""
    async def main() -> AttemptResult:
        async with raw_server(then_stay(answer)) as server, sender() as client:
            return await client.send(server.url, [], b"{}", DEADLINE)
    assert malformed(run_for(main), "")


def test_head_ending_lf_crlf_is_refused_at_once() -> None:
    """A head ending "\\n\\r\\n" is refused as it arrives, not waited on until the deadline."""
    async def main() -> AttemptResult:
        async with raw_server(then_stay(b"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok")) \
                as server, sender() as client:
            return await client.send(server.url, [], b"{}", DEADLINE)
    assert malformed(run_for(main), "missing expected CR")


def test_long_chunk_extension_in_one_write_is_refused() -> None:
    """A 100 KB chunk extension arriving in one write is refused, whatever the read size."""
    answer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"2;ext=" + b"e" * 100_000 + b"\r\nok\r\n0\r\n\r\n")

    async def main() -> AttemptResult:
        async with raw_server(then_stay(answer)) as server, sender() as client:
            return await client.send(server.url, [], b"{}", DEADLINE)
    assert malformed(run_for(main), "chunk-size line or trailers longer than 8 KiB")


def test_http_1_0_keep_alive_chunked_connection_is_not_reused() -> None:
    """An HTTP/1.0 answer with keep-alive and chunked is read, then its connection closed."""
    answer = (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"2\r\nok\r\n0\r\n\r\n")

    async def main() -> tuple[list[AttemptResult], Server]:
        async with raw_server(answering(answer)) as server, sender() as client:
            return [await client.send(server.url, [], b"{}", DEADLINE) for _ in range(2)], server
    results, server = run_for(main)
    assert [(r.status, r.body_excerpt) for r in results] == [(200, "ok")] * 2
    assert [len(c) for c in server.connections] == [1, 1]


# -- a connection is reused only once its whole request was written ------------------------

BIG = 16 * 1024 * 1024  # more than the kernel's socket buffers take while nobody reads


def answering_early(server: list[Server]) -> Handler:
    """Answer a big POST with 413 before reading its body; read the body only afterwards.

    Once the client has had its answer (and opened another connection, or
    not), the rest of the body is read and the connection serves on, as a
    server that drains an unwanted body does.
    """
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            if length < BIG:
                await reader.readexactly(length)
                writer.write(OK)
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            for _ in range(500):  # until the next request went elsewhere, or 5 s
                if len(server[0].connections) > 1:
                    break
                await asyncio.sleep(0.01)
            await reader.readexactly(length)
    return handler


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_connection_answered_before_its_body_was_sent_is_not_reused(
        tls: bool, tmp_path: Path) -> None:
    """A 413 sent before the server read a 16 MiB body: the next POST goes on a new connection."""
    if tls and shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    options: dict[str, Any] = {}
    server_tls = None
    if tls:
        ca, cert, key = make_ca_and_cert(tmp_path)
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(cert, key)
        resolve, _ = fake_dns("127.0.0.1")
        options["transport"] = H1Transport(
            resolver=resolve, tls_context=ssl.create_default_context(cafile=str(ca)))
    holder: list[Server] = []

    async def main() -> tuple[list[int | None], Server]:
        async with raw_server(answering_early(holder), tls=server_tls) as server, \
                sender(**options) as client:
            holder.append(server)
            url = f"https://hooks.test:{server.port}/" if tls else server.url
            big = await client.send(url, [], b"x" * BIG, DEADLINE)
            small = await client.send(url, [], b"{}", DEADLINE)
            return [big.status, small.status], server
    statuses, server = run_for(main)
    assert statuses == [413, 200]
    assert [len(c) for c in server.connections] == [1, 1]


# -- a DNS server that stalls for one host name -----------------------------------------

def stalling_lookup(stalled: str) -> tuple[Callable[[str], list[AddrInfo]], list[str],
                                           threading.Event]:
    """A blocking lookup that hangs for ``stalled`` until released, else answers 127.0.0.1."""
    asked: list[str] = []
    release = threading.Event()

    def lookup(host: str) -> list[AddrInfo]:
        asked.append(host)
        if host == stalled:
            release.wait(HANG_GUARD)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
    return lookup, asked, release


def test_lookups_of_one_host_name_share_one_thread() -> None:
    """Concurrent lookups of one name make one call; each gets the port it asked for."""
    lookup, asked, release = stalling_lookup("stalled.test")
    resolver = HostResolver(lookup, threads=2)

    async def main() -> list[list[AddrInfo]]:
        waiting = [asyncio.create_task(resolver("stalled.test", port)) for port in (80, 443)]
        await asyncio.sleep(0.05)
        release.set()
        return list(await asyncio.gather(*waiting))
    try:
        answers = run_for(main)
    finally:
        release.set()
        resolver.close()
    assert asked == ["stalled.test"]
    assert [[info[4] for info in infos] for infos in answers] == [
        [("127.0.0.1", 80)], [("127.0.0.1", 443)]]


def test_stalling_dns_for_one_host_holds_up_no_other_host() -> None:
    """A name whose lookup hangs costs one thread: lookups and POSTs to other names go through."""
    lookup, asked, release = stalling_lookup("stalled.test")
    resolver = HostResolver(lookup, threads=2)

    async def main() -> tuple[list[AttemptResult], list[AttemptResult], list[str], AttemptResult]:
        async with raw_server(answering(OK)) as server, sender(transport=H1Transport(
                max_connections=200, resolver=resolver)) as client:
            def url(host: str) -> str:
                return f"http://{host}:{server.port}/"
            # Deliveries to the stalled name: each gives up at its deadline,
            # the next wave joins the lookup still running.
            waves = [await asyncio.gather(*(client.send(url("stalled.test"), [], b"{}", 0.5)
                                            for _ in range(20))) for _ in range(2)]
            stalled = [result for wave in waves for result in wave]
            others = asyncio.gather(*(client.send(url(f"h{i}.test"), [], b"{}", DEADLINE)
                                      for i in range(100)))
            healthy = list(await others)
            asked_while_stalled = list(asked)
            release.set()
            after = await client.send(url("stalled.test"), [], b"{}", DEADLINE)
            return stalled, healthy, asked_while_stalled, after
    try:
        stalled, healthy, asked_while_stalled, after = run_for(main)
    finally:
        release.set()
        resolver.close()
    assert {(r.status, r.error_kind) for r in stalled} == {(None, "timeout")}
    assert [r.status for r in healthy] == [200] * 100
    # One lookup for all 40 stalled attempts, one for each other name.
    others = [f"h{i}.test" for i in range(100)]
    assert sorted(asked_while_stalled) == sorted(["stalled.test", *others])
    assert after.status == 200  # and once the DNS server answers, so does the name


def test_default_transport_looks_names_up_on_threads_of_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a resolver given, lookups run on the transport's own threads, not asyncio's pool."""
    threads: list[str] = []
    real = socket.getaddrinfo

    def recording(host: str, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real("127.0.0.1" if host == "hooks.test" else host, *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", recording)

    async def main() -> AttemptResult:
        async with raw_server(answering(OK)) as server, sender() as client:
            return await client.send(f"http://hooks.test:{server.port}/", [], b"{}", DEADLINE)
    assert run_for(main).status == 200
    assert len(threads) == 1
    assert threads[0].startswith("lookup")
