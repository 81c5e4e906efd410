"""A lean HTTP/1.1 transport for httpx: ``httpx.Request`` in, ``httpx.Response`` out.

The dispatcher's wire. It keeps httpx's types and exceptions, so respx mocks
the very path production runs, and puts our own asyncio client under them
at a fraction of a general-purpose client's CPU per request (BENCHMARKS.md,
"HTTP client"): one write per request, the response parsed by llhttp in the
protocol callback (``connection``, ``parse``), connections opened by
``dial`` (DNS on threads of its own, SSRF guard, TLS), and nothing a webhook
POST does not need: no redirects, cookies, proxies, decompression or
environment.

Connections are kept alive in ``pool``. One goes back to the pool only
once its request was written whole and its response read to the end; a
body left unread is cheaper to drop with its connection than to drain. An
idle connection the server closed is noticed (EOF) and never reused. A
request is never resent once a byte of it may have reached the server (a
POST is not idempotent): only when the very first write on a reused
connection failed outright does it go once more, on a new connection.

Errors, all httpx ones but ``DescriptorsExhausted`` (an ``OSError``: this
process has no file descriptor left, nothing the endpoint did), which passes
through as it is: ``BlockedAddress`` (a ``ConnectError``) when the
policy refuses the host; ``ConnectError`` (refused, DNS, TLS);
``ConnectTimeout``/``ReadTimeout``/``PoolTimeout`` (only for the timeouts an
``httpx.AsyncClient`` puts in the request's extensions); ``WriteError``;
``ReadError`` (reset, or closed before the response ended);
``RemoteProtocolError`` (a malformed answer); ``UnsupportedProtocol`` (not
http or https). Cancellation closes the connection in use.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator

import certifi
import httpx

from dispatcher.http.connection import Connection, PoolKey
from dispatcher.http.dial import BlockedAddress, DescriptorsExhausted, DialLimit, open_connection
from dispatcher.http.netguard import NetworkPolicy
from dispatcher.http.parse import ResponseParser
from dispatcher.http.pool import Pool
from dispatcher.http.resolve import HostResolver, Resolver

__all__ = ["BlockedAddress", "DescriptorsExhausted", "H1Transport", "PoolKey", "ReadBody"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class H1Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive and bounded pools; TLS always verified, nothing from the env."""

    def __init__(self, *, max_connections: int = 100, max_connections_per_host: int = 0,
                 keepalive_expiry: float = 4.0, policy: NetworkPolicy | None = None,
                 resolver: Resolver | None = None,
                 tls_context: ssl.SSLContext | None = None) -> None:
        """``resolver`` replaces the system's DNS and ``tls_context`` certifi's CAs (tests).

        The policy checks whatever the resolver answers. Without one, names are
        looked up by a ``HostResolver`` of this transport's own, closed with it.
        """
        # A keep-alive expiry shorter than the 5 s idle timeout of common
        # servers (Node.js), so we do not send on a connection being closed.
        self._pool = Pool(max_connections, max_connections_per_host, keepalive_expiry)
        self._policy = policy if policy is not None and policy.block_private else None
        self._own_resolver: HostResolver | None = None
        if resolver is None:
            resolver = self._own_resolver = HostResolver()
        self._resolve = resolver
        self._tls = tls_context
        self.dials = DialLimit()  # the ceiling on sockets connecting at once

    def idle_connections(self) -> int:
        """Idle connections still open (for tests)."""
        return self._pool.idle_count()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in _DEFAULT_PORTS or not url.raw_host:
            raise httpx.UnsupportedProtocol(f"cannot send to {scheme or 'a relative'} URL",
                                            request=request)
        key = (scheme, url.raw_host.decode("ascii"), url.port or _DEFAULT_PORTS[scheme])
        payload = await _encode(request)
        timeouts: dict[str, float | None] = request.extensions.get("timeout") or {}
        read_timeout = timeouts.get("read")
        try:
            conn, parser = await self._exchange(
                key, payload, head_request=request.method == "HEAD",
                connect_timeout=timeouts.get("connect"), pool_timeout=timeouts.get("pool"),
                read_timeout=read_timeout)
        except httpx.RequestError as exc:
            exc.request = request
            raise
        if parser.done:  # the usual case: the whole answer came with its head
            stream: httpx.AsyncByteStream = ReadBody(parser.take())
            self._pool.release(conn)
        else:
            stream = _Body(self._pool, conn, read_timeout, request)
        return httpx.Response(
            status_code=parser.status, headers=parser.headers, stream=stream, request=request,
            extensions={"http_version": parser.version, "reason_phrase": parser.reason})

    async def post(self, key: PoolKey, payload: bytes, limit: int, body: bytes = b"",
                   ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send a request already encoded (``payload``: its head and body, or its head when
        ``body`` comes apart) to ``key``; the status, the headers and at most ``limit``
        bytes of the answer's body: what a webhook POST needs, with none of httpx's
        request and response objects (the dispatcher's hot path)."""
        conn, parser = await self._exchange(key, payload, head_request=False, body=body)
        body = parser.take()
        try:
            while not parser.done and len(body) < limit:
                chunk = await conn.read_body(None)
                if not chunk:
                    break
                body += chunk
        finally:
            self._pool.release(conn)  # kept only if the response was read to its end
        return parser.status, parser.headers, body[:limit]

    async def _exchange(self, key: PoolKey, payload: bytes, *, head_request: bool,
                        body: bytes = b"", connect_timeout: float | None = None,
                        pool_timeout: float | None = None,
                        read_timeout: float | None = None) -> tuple[Connection, ResponseParser]:
        """Write the request on a pooled connection and read the answer's head."""
        pool, conn = self._pool, None
        try:
            conn, reused = await pool.acquire(key, self._open, connect_timeout=connect_timeout,
                                              pool_timeout=pool_timeout)
            conn.send(payload, head_request, body)
            if reused and conn.unsent():
                # Not a byte reached the server: one more try on a new connection.
                pool.drop(conn)
                conn, _ = await pool.acquire(key, self._open, fresh=True,
                                             connect_timeout=connect_timeout,
                                             pool_timeout=pool_timeout)
                conn.send(payload, head_request, body)
            return conn, await conn.read_head(read_timeout)
        except BaseException:
            if conn is not None:
                pool.drop(conn)  # failed or cancelled: never back to the pool half-used
            raise

    async def aclose(self) -> None:
        """Close every connection, idle or not, and the lookup threads."""
        self._pool.close()
        if self._own_resolver is not None:
            self._own_resolver.close()
        await asyncio.sleep(0)  # let the transports finish closing

    async def _open(self, conn: Connection) -> None:
        scheme, host, port = conn.key
        tls = self._context() if scheme == "https" else None
        await open_connection(conn, host, port, tls=tls, policy=self._policy,
                              resolve=self._resolve, dials=self.dials)

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            # Certificates from certifi, as httpx does: SSL_CERT_FILE and friends
            # in the environment do not change whom we trust.
            self._tls = ssl.create_default_context(cafile=certifi.where())
            self._tls.set_alpn_protocols(["http/1.1"])
        return self._tls


class ReadBody(httpx.ByteStream):
    """A body read to its end with the head; ``body`` spares a reader the async iteration."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        self.body = body


class _Body(httpx.AsyncByteStream):
    """A body still arriving; its connection goes back to the pool at the end, else closes."""

    def __init__(self, pool: Pool, conn: Connection, read_timeout: float | None,
                 request: httpx.Request) -> None:
        self._pool = pool
        self._conn: Connection | None = conn
        self._timeout = read_timeout
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (conn := self._conn) is not None:
            try:
                chunk = await conn.read_body(self._timeout)
            except BaseException as exc:
                self._end()
                if isinstance(exc, httpx.RequestError):
                    exc.request = self._request
                raise
            if not chunk:
                self._end()
                return
            yield chunk

    async def aclose(self) -> None:
        self._end()

    def _end(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn)  # kept only if the response was read to its end


async def _encode(request: httpx.Request) -> bytes:
    """The request as it goes on the wire: head and body in one buffer."""
    try:
        body: bytes = request.content
    except httpx.RequestNotRead:
        body = await request.aread()
    headers: list[tuple[bytes, bytes]] = request.headers.raw
    if not isinstance(request.stream, httpx.ByteStream) or request.url.userinfo:
        headers = _reframed(request, headers, body)
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    lines += [name + b": " + value for name, value in headers]
    head = b"\r\n".join(lines)
    # One CRLF between lines and none inside: a value cannot start a new header.
    if head.count(b"\n") != len(lines) - 1 or head.count(b"\r") != len(lines) - 1:
        raise httpx.LocalProtocolError("a header contains CR or LF", request=request)
    return head + b"\r\n\r\n" + body


def _reframed(request: httpx.Request, headers: list[tuple[bytes, bytes]],
              body: bytes) -> list[tuple[bytes, bytes]]:
    """Headers for a body read from a stream (sent with a length), and URL credentials."""
    out = [(n, v) for n, v in headers if n.lower() not in (b"content-length", b"transfer-encoding")]
    if body or request.method not in ("GET", "HEAD"):
        out.append((b"Content-Length", str(len(body)).encode("ascii")))
    url = request.url
    if url.userinfo and "authorization" not in request.headers:
        token = f"{url.username}:{url.password}".encode()
        out.append((b"Authorization", b"Basic " + base64.b64encode(token)))
    return out
