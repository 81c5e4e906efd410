"""Raw HTTP servers on 127.0.0.1 and what the transport's tests share with each other.

:func:`raw_server` serves a handler that writes bytes as it likes and
records each request's head per connection; :func:`answering` is the usual
handler. :func:`fake_dns` stands in for name lookups, :func:`make_ca_and_cert`
makes a test CA, and :func:`run_for` runs a test's body under a hang guard.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dispatcher.http.resolve import AddrInfo
from dispatcher.http.sender import HttpSender

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

# Long enough that an attempt ending at its deadline would fail the test (as
# "timeout", or by the hang guard below), never a bound on how fast it must be.
DEADLINE = 30.0
HANG_GUARD = 60.0


@asynccontextmanager
async def sender(**options: Any) -> AsyncIterator[HttpSender]:
    client = HttpSender(16, False, [], "outbox-test/1", **options)
    try:
        yield client
    finally:
        await client.aclose()


@dataclass
class Server:
    """What a raw server saw: request heads per connection, in order."""

    url: str
    port: int
    connections: list[list[bytes]] = field(default_factory=list)
    closed: int = 0  # connections that ended

    @property
    def requests(self) -> list[bytes]:
        return [head for conn in self.connections for head in conn]


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, list[bytes]], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    """A server on 127.0.0.1 whose handler writes raw bytes and appends request heads."""
    tasks: set[asyncio.Task[Any]] = set()
    state = Server("", 0)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        heads: list[bytes] = []
        state.connections.append(heads)
        try:
            await handler(reader, writer, heads)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            state.closed += 1
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    state.port = server.sockets[0].getsockname()[1]
    state.url = f"{'https' if tls else 'http'}://127.0.0.1:{state.port}/"
    try:
        yield state
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader, heads: list[bytes]) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":", 1)[1]))
    heads.append(head)
    return head


def answering(answer: bytes, close_after: bool = False) -> Handler:
    """Answer every request with ``answer`` (and hang up after the first, if asked)."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      heads: list[bytes]) -> None:
        while True:
            await read_request(reader, heads)
            writer.write(answer)
            await writer.drain()
            if close_after:
                return
    return handler


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """On a fresh event loop, as the dispatcher runs."""
    with asyncio.Runner() as runner:
        runner.run(main())


def run_for(main: Callable[[], Any]) -> Any:
    """Run ``main`` under the hang guard: a hang fails the test instead of stalling the suite."""
    outcome: list[Any] = []

    async def guarded() -> None:
        async with asyncio.timeout(HANG_GUARD):
            outcome.append(await main())
    run(guarded)
    return outcome[0]


def fake_dns(*addresses: str) -> tuple[Callable[[str, int], Awaitable[list[AddrInfo]]],
                                       list[str]]:
    """A resolver answering every name with ``addresses``, and the names it was asked."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[AddrInfo]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]
    return resolve, asked


def make_ca_and_cert(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for DNS name hooks.test."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=test CA",
            "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", *ec, "-subj", "/CN=hooks.test", "-keyout", "srv.key", "-out", "srv.csr")
    (tmp / "ext.cnf").write_text("subjectAltName=DNS:hooks.test\n")
    openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", "ext.cnf", "-out", "srv.pem")
    return tmp / "ca.pem", tmp / "srv.pem", tmp / "srv.key"
