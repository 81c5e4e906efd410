"""A lean HTTP/1.1 receiver on 127.0.0.1, for tests, the demo and benchmarks.

It runs its own asyncio loop in a background thread, keeps connections
alive, records every request (with its arrival time) and answers through a
programmable ``responder``. Lean on purpose: a benchmark should measure the
dispatcher, not the receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float  # time.time() on arrival

    def header(self, name: str) -> str | None:
        """The header's value (names compared in lower case), or None."""
        return self.headers.get(name.lower())

    @classmethod
    async def read(cls, reader: asyncio.StreamReader) -> Request:
        """The next request on ``reader``, head and body (``Content-Length`` framing only).

        Raises ``asyncio.IncompleteReadError`` when the client closed first.
        """
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        return cls(method, path, headers, body, time.time())


@dataclass(frozen=True, slots=True)
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0  # seconds to wait before answering (a slow endpoint)


Responder = Callable[[Request], Response | Awaitable[Response]]

_REASONS = {200: "OK", 204: "No Content", 301: "Moved Permanently", 302: "Found",
            400: "Bad Request", 404: "Not Found", 408: "Request Timeout", 410: "Gone",
            413: "Content Too Large",
            425: "Too Early", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def _ok(_: Request) -> Response:
    return Response()


class Receiver:
    """``with Receiver() as rx: ... rx.url ... rx.requests``

    ``Receiver(tls=context)`` serves HTTPS with a server ``ssl.SSLContext``:
    a certificate of a private CA (``--ca-file``), and one that requires a
    client certificate (``--client-cert``) when the context asks for it.
    """

    def __init__(self, responder: Responder = _ok, *, record: bool = True,
                 tls: ssl.SSLContext | None = None) -> None:
        """``tls``: serve HTTPS with this server context (its certificate, and whether it
        asks for a client certificate), as an endpoint signed by a private CA would."""
        self.tls = tls
        self.responder: Responder = responder
        self.record = record
        self.requests: list[Request] = []
        self.count = 0
        self.port = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="outbox-receiver")
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """Where to point an endpoint: ``http://127.0.0.1:PORT/`` (``https://`` with ``tls``)."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/"

    def start(self) -> Receiver:
        """Listen on a free port of 127.0.0.1, on a thread of its own; ``with`` calls it."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024,
                                                  ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        """Stop listening, close the connections, end the thread; ``with`` calls it."""
        async def stop() -> None:
            if self._server:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            # Cancel the connection handlers and let them finish, so that
            # stopping the loop destroys no pending task.
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def snapshot(self) -> list[Request]:
        """A copy of the requests received so far (``requests`` grows meanwhile)."""
        with self._lock:
            return list(self.requests)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Request]:
        """Wait until ``count`` requests arrived; returns them (raises on timeout)."""
        deadline = time.monotonic() + timeout
        while self.count < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"receiver got {self.count} requests, expected {count}")
            time.sleep(0.01)
        return self.snapshot()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while True:
                request = await Request.read(reader)
                with self._lock:
                    self.count += 1
                    if self.record:
                        self.requests.append(request)
                answer = self.responder(request)
                response = await answer if isinstance(answer, Awaitable) else answer
                if response.delay:
                    await asyncio.sleep(response.delay)
                reason = _REASONS.get(response.status, "Status")
                out = [f"HTTP/1.1 {response.status} {reason}",
                       f"content-length: {len(response.body)}"]
                out += [f"{k}: {v}" for k, v in response.headers.items()]
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + response.body)
                await writer.drain()
                if (request.header("connection") or "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError,
                ValueError):
            pass
        finally:
            self._writers.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            writer.close()
