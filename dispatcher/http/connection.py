"""One HTTP/1.1 connection of the transport: an asyncio Protocol, a request at a time.

What arrives goes straight into a ``ResponseParser`` in the protocol
callback, which wakes the one task waiting: no StreamReader, no copies into
an intermediate buffer, one future per wait. The pool (``pool``) decides
when a connection may carry the next request; ``dial`` opens it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import NamedTuple, cast

import httpx

from dispatcher.http.parse import ResponseParser
from dispatcher.http.proxy import Proxy
from dispatcher.policy.model import TlsFiles


class PoolKey(NamedTuple):
    """What a connection is for: a request may use any connection of its own key only."""

    scheme: str
    host: str  # ASCII, as the URL has it (an IPv6 address without brackets)
    port: int
    tls: TlsFiles | None = None  # the endpoint's own CA bundle and client certificate
    proxy: Proxy | None = None   # the proxy the connection goes through; None: direct
    guarded: bool = False  # the endpoint's URL was checked: the network policy applies always


# Body bytes buffered before we stop reading the socket until the reader catches up.
_HIGH_WATER = 256 * 1024
# A request this small leaves the process in one write to the kernel's socket buffer
# (64 KiB and more): where a TLS transport cannot say what it still holds, a
# connection is reused only after such a request.
_SURELY_SENT = 16 * 1024


class Connection(asyncio.Protocol):
    """A keep-alive connection: ``send`` a request, then read its head and body."""

    def __init__(self, key: PoolKey, on_lost: Callable[[Connection], None]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None  # None while idle
        self.closed = False       # EOF or loss seen, or closed by us
        self.error: httpx.TransportError | None = None  # why the response cannot finish
        self.idle = False         # waiting in the pool
        self.idle_since = 0.0
        self.keepalive = 0.0      # seconds it may stay idle (the pool's, or the server's less)
        self.reused = False       # it has carried more than one request
        self.idled = 0.0          # seconds it was idle before this request, when reused
        self.sent = 0              # bytes of the last request
        self.sock: socket.socket | None = None  # beneath the transport (TLS's too), to peek
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # -- asyncio callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None or self.error is not None:
            self.abort()  # bytes nobody asked for: out of step with the server
            return
        try:
            parser.feed(data)
        except httpx.RemoteProtocolError as exc:
            self.error = exc
            self.abort()
        else:
            if parser.pending > _HIGH_WATER and not self._paused and self.transport:
                self._paused = True
                self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self.closed = True
        parser = self.parser
        if parser is not None and self.error is None:
            try:
                parser.feed_eof()
            except httpx.ReadError as exc:
                self.error = exc
        self._wake()
        return None  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        parser = self.parser
        if parser is not None and not parser.done and self.error is None:
            if exc is None:
                text = "connection closed mid-response"
            elif parser.received == 0:  # a TLS 1.3 refusal may arrive as a reset
                text = f"connection lost without a response: {exc}"
            else:
                text = f"connection lost: {exc}"
            self.error = httpx.ReadError(text)
            self.error.__cause__ = exc
        self._wake()
        self._on_lost(self)

    # -- used by the pool ----------------------------------------------------

    def send(self, payload: bytes, body: bytes = b"") -> None:
        """Write a whole request (``payload``, then ``body`` when given apart: a large body
        is written as it is, not copied behind its head); its response's parser starts empty."""
        assert self.transport is not None
        self.parser = ResponseParser()
        self.error = None
        self.sent = len(payload) + len(body)
        self.transport.write(payload)
        if body:
            self.transport.write(body)

    def alive(self) -> bool:
        """Open, with no EOF or error seen: fit to carry a request."""
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def reusable(self) -> bool:
        """Fit for the next request: its whole request written, its whole response read.

        A server may answer before it has read the body (a 413, say); what is
        still unsent of that body would reach it as the start of our next
        request, so such a connection is closed however its answer ended.
        """
        parser, transport = self.parser, self.transport
        if parser is None or not parser.done or not parser.keep_alive or not self.alive():
            return False
        assert transport is not None
        unsent = _unsent(transport)
        if unsent is None:  # a TLS transport that does not tell: trust only small requests
            return self.sent <= _SURELY_SENT
        return unsent == 0

    def stirred(self) -> bool:
        """While idle: the kernel holds something from the server (its end, a reset, stray
        bytes) that the event loop has not read yet; such a connection is not reused.

        One non-blocking peek: a server that closes right after answering has
        its FIN here before the loop has run the callback that would see it.
        (On TLS, a late session ticket looks the same: one handshake more.)
        """
        sock = self.sock
        if sock is None:
            return False
        try:
            sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True  # b"": the end; bytes: nothing we asked for

    async def read_head(self) -> ResponseParser:
        """Wait until the final head is parsed."""
        parser = self.parser
        assert parser is not None
        while not parser.head_done:
            if self.error is not None:
                raise self.error
            await self._wait()
        return parser

    async def read_body(self) -> bytes:
        """The next body bytes, b"" at the end of the body."""
        parser = self.parser
        assert parser is not None
        while True:
            if parser.pending:
                self.resume()
                return parser.take()
            if parser.done:
                return b""
            if self.error is not None:
                raise self.error
            await self._wait()

    def resume(self) -> None:
        """Read from the socket again after the reader caught up."""
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        """Close at once, unflushed: the connection is never used again."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    async def _wait(self) -> None:
        """Until the protocol callbacks have news; the sender's deadline bounds the wait."""
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _unsent(transport: asyncio.Transport) -> int | None:
    """Bytes written to ``transport`` that the kernel has not taken yet; None if unknown.

    A TLS transport counts only what it has not yet encrypted; the ciphertext
    waits in the TCP transport beneath it. asyncio's does not expose that one,
    so it is looked up; uvloop's keeps it in libuv, out of reach: unknown.
    """
    unsent = transport.get_write_buffer_size()
    if transport.get_extra_info("sslcontext") is None:
        return unsent
    beneath = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None)
    if isinstance(beneath, asyncio.WriteTransport):
        return unsent + beneath.get_write_buffer_size()
    return None
