"""A scriptable hostile receiver: real sockets on 127.0.0.1 that answer badly on purpose.

``outbox.testing.Receiver`` answers well-formed HTTP and takes a responder;
what it cannot do (reset a connection in the middle of an answer, drip an
answer a byte at a time) needs a raw server, so :class:`HostileReceiver` is
one: its own asyncio loop in a background thread, reading each request whole,
then acting out the :class:`Act` its ``script`` returns for the request and
the number of times that ``webhook-id`` has arrived (1 for the first try):

- ``Act.status(code, body=b"", headers=None)``: a well-formed answer;
- ``Act.hang()``: no answer until the client goes away, or until the test
  calls ``release()`` (then a 200);
- ``Act.drip(interval)``: a 200 head announcing a body, then a byte per
  ``interval`` seconds, for ever: only a deadline on the whole attempt ends it;
- ``Act.huge(size)``: a 500 whose body is ``size`` bytes;
- ``Act.reset_mid_answer()``: half an answer's head, then a TCP reset;
- ``Act.echo(status=500)``: the request itself sent back as the body, as a
  debugging endpoint or a proxy's error page would.

``scripted(*acts)`` is the usual script: the n-th try of every event gets
the n-th act, and 200 once the acts run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from outbox.testing import Request
from tests.support.loop_server import LoopServer


@dataclass(frozen=True, slots=True)
class Act:
    """What the receiver does with one request."""

    kind: Literal["status", "hang", "drip", "huge", "reset", "echo"]
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    interval: float = 0.2
    size: int = 0

    @staticmethod
    def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Act:
        return Act("status", status, body, headers or {})

    @staticmethod
    def hang() -> Act:
        return Act("hang")

    @staticmethod
    def drip(interval: float = 0.2) -> Act:
        return Act("drip", interval=interval)

    @staticmethod
    def huge(size: int = 16 * 1024 * 1024) -> Act:
        return Act("huge", 500, size=size)

    @staticmethod
    def reset_mid_answer() -> Act:
        return Act("reset")

    @staticmethod
    def echo(status: int = 500) -> Act:
        return Act("echo", status)


Script = Callable[[Request, int], Act]


def scripted(*acts: Act) -> Script:
    """The n-th try of each event gets ``acts[n - 1]``; 200 after the last."""
    def script(_: Request, attempt: int) -> Act:
        return acts[attempt - 1] if attempt <= len(acts) else Act.answer(200)
    return script


def as_http(request: Request) -> bytes:
    """The request as it came, one header per line."""
    head = [f"{request.method} {request.path} HTTP/1.1"]
    head += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + request.body


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class HostileReceiver(LoopServer):
    """``with HostileReceiver(scripted(Act.hang())) as rx:`` ... ``rx.url`` ... ``rx.tries``"""

    def __init__(self, script: Script | None = None, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: serve HTTPS with this server context (``url`` then says https)."""
        super().__init__("hostile-receiver")
        self.script = script or scripted()
        self.tls = tls
        self.requests: list[Request] = []
        self.tries: Counter[str] = Counter()  # per webhook-id
        self.peers: list[int] = []  # the client's port of each request, in arrival order
        self._pending = 0
        self._released: asyncio.Event | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/"

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def pending(self) -> int:
        """Requests that arrived and have not been answered (hanging ones included)."""
        with self._lock:
            return self._pending

    def release(self) -> None:
        """Answer every hanging request with 200, and every later ``Act.hang()`` at once."""
        def wake() -> None:
            assert self._released is not None
            self._released.set()
        self._loop.call_soon_threadsafe(wake)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                request = await _read(reader)
                if request is None:
                    return
                webhook_id = request.header("webhook-id") or ""
                with self._lock:
                    self.requests.append(request)
                    self.peers.append(writer.get_extra_info("peername")[1])
                    self.tries[webhook_id] += 1
                    attempt = self.tries[webhook_id]
                    self._pending += 1
                try:
                    act = self.script(request, attempt)
                    if not await self._act(act, request, reader, writer):
                        return
                finally:
                    with self._lock:
                        self._pending -= 1
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # our own shutdown
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _act(self, act: Act, request: Request, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> bool:
        """Do ``act``; True when the connection may carry another request."""
        if act.kind == "hang":
            assert self._released is not None
            gone = asyncio.ensure_future(reader.read())  # b"": the client closed
            released = asyncio.ensure_future(self._released.wait())
            try:
                await asyncio.wait([gone, released], return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
                released.cancel()
                await asyncio.gather(gone, released, return_exceptions=True)
            if not self._released.is_set():
                return False
            act = Act.answer(200)
        if act.kind == "reset":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-le")
            await writer.drain()
            _reset(writer)
            return False
        if act.kind == "drip":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n")
            while True:
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(act.interval)
        if act.kind == "huge":
            writer.write(f"HTTP/1.1 500 Oops\r\ncontent-length: {act.size}\r\n\r\n".encode())
            chunk = b"x" * 65536
            for _ in range(act.size // len(chunk)):
                writer.write(chunk)
                await writer.drain()
            return False
        body = as_http(request) if act.kind == "echo" else act.body
        head = [f"HTTP/1.1 {act.status} Scripted", f"content-length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in act.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        return True

    async def _start(self) -> None:
        self._released = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]



async def _read(reader: asyncio.StreamReader) -> Request | None:
    """One request, head and body; None when the client closed the connection."""
    try:
        return await Request.read(reader)
    except asyncio.IncompleteReadError:
        return None
