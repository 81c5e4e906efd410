"""The dispatcher's HTTP/1.1 client: a request as bytes in, status, headers and body out.

``H1Transport.post`` is the one request path: ``HttpSender`` writes the
request (``sender``) and this sends it on a pooled connection and reads the
answer, at a fraction of a general-purpose client's CPU per request
(BENCHMARKS.md, "HTTP client"): one write per request, the response parsed
by llhttp in the protocol callback (``connection``, ``parse``), connections
opened by ``dial`` (DNS on threads of its own, SSRF guard, TLS) or, when the
pool key names a proxy, by ``tunnel``, with the TLS context of the
endpoint's own files (``tls``), and nothing a webhook POST does not need:
no request or response objects, redirects, cookies, decompression or
environment. Tests run it against real
servers on 127.0.0.1; one that needs an error no server can cause
subclasses it and overrides ``post``.

Connections are kept alive in ``pool``. One goes back to the pool only
once its request was written whole and its response read to the end; a
body left unread is cheaper to drop with its connection than to drain. An
idle connection the server closed is noticed (EOF, or the kernel's word
before the loop has read it) and never reused, and one is let go before
the server's own ``Keep-Alive`` timeout (``pool``).

A request on a reused connection that ends (EOF, reset) before a byte of
the answer arrived is sent again at once, once, on a new connection: the
server was closing that idle connection as the request went, and did not
hand it to the application. (If it did after all, the receiver sees the
request twice, which at-least-once delivery allows and its ``webhook-id``
lets it drop.) That is not an attempt of its own: the answer says
``resent``. Any other request is never sent twice: a POST is not
idempotent, and once the answer has begun, or the connection was new, the
server had it.

Errors are httpx's exception classes (the sender classifies by them), but
``DescriptorsExhausted`` (an ``OSError``: this process has no file
descriptor left, nothing the endpoint did), which passes through as it is:
``BlockedAddress`` (a ``ConnectError``) when the policy refuses the host;
``ConnectError`` (refused, DNS, TLS; ``TlsFileError`` for the endpoint's own
files, ``ProxyError`` for the proxy's failures); ``ConnectTimeout`` (the kernel gave up
connecting); ``ReadError`` (reset, or closed before the response ended);
``RemoteProtocolError`` (a malformed answer). There are no timeouts here:
the sender's deadline covers the whole attempt, and cancellation closes the
connection in use.
"""

from __future__ import annotations

import asyncio
import ssl

import httpx

from dispatcher.http.connection import Connection, PoolKey
from dispatcher.http.dial import BlockedAddress, DescriptorsExhausted, DialLimit, open_connection
from dispatcher.http.netguard import NetworkPolicy
from dispatcher.http.parse import ResponseParser
from dispatcher.http.pool import Pool
from dispatcher.http.resolve import HostResolver, Resolver
from dispatcher.http.tls import TlsContexts
from dispatcher.http.tunnel import open_through

__all__ = ["Answer", "BlockedAddress", "DescriptorsExhausted", "H1Transport", "PoolKey"]


Answer = tuple[int, list[tuple[bytes, bytes]], bytes, bytes, bool]
"""What ``post`` returns, what a webhook POST needs of the response: the status, the
headers (as sent: names keep their case), at most the limit asked for of the body, the
status line's reason phrase (may be empty), and whether the request went twice (the
reused connection closed before answering). A plain tuple: it is made once per request."""


class H1Transport:
    """HTTP/1.1 with keep-alive and bounded pools; TLS always verified; a proxy when the key
    names one (the sender reads the proxy variables, through the dispatcher's config)."""

    def __init__(self, *, max_connections: int = 100, max_connections_per_host: int = 0,
                 keepalive_expiry: float = 4.0, policy: NetworkPolicy | None = None,
                 resolver: Resolver | None = None,
                 tls_context: ssl.SSLContext | None = None) -> None:
        """``resolver`` replaces the system's DNS and ``tls_context`` certifi's CAs for the
        endpoints without a CA bundle of their own (tests).

        The policy checks whatever the resolver answers. Without one, names are
        looked up by a ``HostResolver`` of this transport's own, closed with it.
        """
        # A keep-alive expiry shorter than the 5 s idle timeout of common
        # servers (Node.js), so we do not send on a connection being closed.
        self._pool = Pool(max_connections, max_connections_per_host, keepalive_expiry)
        self._policy = policy if policy is not None and policy.block_private else None
        # For a guarded endpoint's connections (its key says so): blocking on whatever the
        # flags, with the allow-list's exceptions. Its own key, so never a connection
        # opened without the guard.
        self._guard = (policy or NetworkPolicy()).guarding()
        self._own_resolver: HostResolver | None = None
        if resolver is None:
            resolver = self._own_resolver = HostResolver()
        self._resolve = resolver
        self.tls = TlsContexts(tls_context)
        self.dials = DialLimit()  # the ceiling on sockets connecting at once

    def idle_connections(self) -> int:
        """Idle connections still open (for tests)."""
        return self._pool.idle_count()

    async def post(self, key: PoolKey, payload: bytes, limit: int, body: bytes = b"",
                   ) -> Answer:
        """Send a request already encoded (``payload``: its head and body, or its head when
        ``body`` comes apart) to ``key``; the status, the headers and at most ``limit``
        bytes of the answer's body: what a webhook POST needs."""
        conn, parser, resent = await self._exchange(key, payload, body)
        body = parser.take()
        try:
            while not parser.done and len(body) < limit:
                chunk = await conn.read_body()
                if not chunk:
                    break
                body += chunk
        finally:
            self._pool.release(conn)  # kept only if the response was read to its end
        return parser.status, parser.headers, body[:limit], parser.reason, resent

    async def _exchange(self, key: PoolKey, payload: bytes,
                        body: bytes) -> tuple[Connection, ResponseParser, bool]:
        """Write the request on a pooled connection and read the answer's head; whether it
        was sent again on a new connection."""
        pool, conn = self._pool, None
        try:
            conn, reused = await pool.acquire(key, self._open)
            conn.send(payload, body)
            try:
                return conn, await conn.read_head(), False
            except httpx.ReadError:
                parser = conn.parser
                if not reused or parser is None or parser.received:
                    raise  # a new connection, or the answer had begun: the server had it
            # Closed under the request before a byte of the answer: once more, on a new one.
            pool.hung_up(conn, conn.idled)
            conn = None
            conn, _ = await pool.acquire(key, self._open, fresh=True)
            conn.send(payload, body)
            return conn, await conn.read_head(), True
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
        """Connect a new connection: direct (the policy applies) or through its proxy (the
        policy cannot see the endpoint's address there), TLS with the endpoint's files."""
        key = conn.key
        tls = self.tls.context(key.tls) if key.scheme == "https" else None
        note = _trusted(key)
        policy = self._guard if key.guarded else self._policy
        if key.proxy is None:
            await open_connection(conn, key.host, key.port, tls=tls, policy=policy,
                                  resolve=self._resolve, dials=self.dials, tls_note=note)
        else:
            # Behind the proxy a name's addresses are the proxy's to see; an address
            # written in the URL is ours, and judged as on a direct connection.
            refusal = policy.refusal(key.host) if policy is not None else None
            if refusal is not None:
                raise BlockedAddress(refusal)
            await open_through(conn, key.proxy, key.host, key.port, tls=tls,
                               resolve=self._resolve, dials=self.dials, tls_note=note)


def _trusted(key: PoolKey) -> str:
    """What a failed handshake's message adds: the endpoint's own files, if it has any."""
    files = key.tls
    if files is None or key.scheme != "https":
        return ""
    named = [f"{option} {path}" for option, path in zip(files._fields, files, strict=True)
             if path is not None]
    return f" (with {', '.join(named)})"
