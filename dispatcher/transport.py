"""An httpx transport over aiohttp: httpx's API and respx in tests, aiohttp's speed.

httpx's own transport (httpcore) costs several times aiohttp's CPU per
request under concurrency (see BENCHMARKS.md, "HTTP client"). This module
speaks httpx's transport API (``httpx.Request`` in, ``httpx.Response`` out)
and hands the wire to one ``aiohttp.ClientSession``; it works under an
``httpx.AsyncClient`` or, as ``HttpSender`` uses it, called directly. It is
ours rather than the ``httpx-aiohttp`` package because we need two things
that package does not give: aiohttp errors mapped to the httpx error a user
would expect (a dropped connection is a ``ReadError``, not a
``ConnectTimeout``), and the SSRF check of ``netguard`` at connect time,
through a resolver that only returns addresses it has checked.

Errors, all httpx ones: ``BlockedAddress`` (a ``ConnectError``) when the
policy refuses the host; ``ConnectTimeout``/``ReadTimeout``; ``ConnectError``
(refused, DNS, TLS); ``ReadError`` (reset, disconnected, body cut short);
``RemoteProtocolError`` (a malformed answer); ``UnsupportedProtocol`` (a URL
aiohttp will not request).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator

import aiohttp
import certifi
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from dispatcher.netguard import NetworkPolicy


class BlockedAddress(httpx.ConnectError):
    """The network policy refused to connect to this host."""


class GuardedResolver(AbstractResolver):
    """DNS through another resolver, keeping only the addresses the policy allows.

    aiohttp connects to exactly what its resolver returns, so a name is never
    looked up a second time between the check and the connection.
    """

    def __init__(self, policy: NetworkPolicy, inner: AbstractResolver) -> None:
        self._policy = policy
        self._inner = inner

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if self._policy.host_allowed(host):
            return results
        allowed = [r for r in results if self._policy.address_allowed(r["host"])]
        if not allowed:
            addresses = ", ".join(sorted({r["host"] for r in results})) or "no address"
            raise BlockedAddress(f"{host} resolves only to private or internal addresses"
                                 f" ({addresses})")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


# What aiohttp raises for trouble on the wire (BlockedAddress is already httpx's).
_WIRE_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
# aiohttp's errors as httpx's, the first match wins.
_ERROR_MAP: tuple[tuple[tuple[type[BaseException], ...], type[httpx.TransportError]], ...] = (
    ((aiohttp.ConnectionTimeoutError,), httpx.ConnectTimeout),
    ((TimeoutError,), httpx.ReadTimeout),  # SocketTimeoutError, any other read timeout
    ((aiohttp.ClientConnectorError,), httpx.ConnectError),  # refused, DNS, TLS handshake
    ((aiohttp.ClientResponseError,), httpx.RemoteProtocolError),  # a malformed answer
    ((aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError), httpx.UnsupportedProtocol),
    # Reset, disconnected, or the body cut short: the connection failed us.
    ((aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError), httpx.ReadError),
)


def _as_httpx(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """The httpx error matching one of aiohttp's (raise it ``from`` the original)."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ClientResponseError):
        # Its str() starts with a made-up "400," and repeats the whole URL.
        text = "malformed response: " + " ".join(str(exc.message).split())
    for types, error in _ERROR_MAP:
        if isinstance(exc, types):
            return error(text, request=request)
    return httpx.TransportError(f"{type(exc).__name__}: {text}", request=request)


class _ResponseStream(httpx.AsyncByteStream):
    """The response body as aiohttp receives it; closing releases the connection."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except _WIRE_ERRORS as exc:
            raise _as_httpx(exc, self._request) from exc

    async def aclose(self) -> None:
        # Back to the pool if the body was read to the end, else the
        # connection is closed (aiohttp knows which).
        self._response.release()


_NO_TIMEOUT = aiohttp.ClientTimeout(total=None)


def _client_timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts in aiohttp's terms (none: no timer per read)."""
    timeout = request.extensions.get("timeout")
    if not timeout:
        return _NO_TIMEOUT
    return aiohttp.ClientTimeout(total=None, connect=timeout.get("pool"),
                                 sock_connect=timeout.get("connect"),
                                 sock_read=timeout.get("read"))


class AiohttpTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive and bounded pools; TLS always verified, nothing from the env."""

    def __init__(self, *, max_connections: int = 100, max_connections_per_host: int = 0,
                 keepalive_expiry: float = 4.0, policy: NetworkPolicy | None = None,
                 resolver: AbstractResolver | None = None) -> None:
        """``resolver`` replaces the system's DNS (tests); the policy then filters it."""
        self._max_connections = max_connections
        self._max_per_host = max_connections_per_host
        # Shorter than the 5 s idle timeout of common servers (Node.js), so we
        # do not send on a connection the server is closing.
        self._keepalive = keepalive_expiry
        self._policy = policy if policy is not None and policy.block_private else None
        self._resolver = resolver
        self._verdicts: dict[str, str | None] = {}  # host -> why it is refused
        self._session: aiohttp.ClientSession | None = None
        self._dns: AbstractResolver | None = None  # the connector's, closed with it

    def _open(self) -> aiohttp.ClientSession:
        """Create the session in the running loop, on first use."""
        # Certificates from certifi, as httpx does: SSL_CERT_FILE and friends
        # in the environment do not change whom we trust.
        context = ssl.create_default_context(cafile=certifi.where())
        resolver = self._resolver or aiohttp.DefaultResolver()
        if self._policy is not None:
            resolver = GuardedResolver(self._policy, resolver)
        self._dns = resolver
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, limit_per_host=self._max_per_host,
            keepalive_timeout=self._keepalive, ssl=context, resolver=resolver)
        return aiohttp.ClientSession(
            connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False, timeout=_NO_TIMEOUT)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._policy is not None:
            host = request.url.host
            if host not in self._verdicts:  # the policy is fixed: decide once per host
                if len(self._verdicts) >= 1024:
                    self._verdicts.clear()
                self._verdicts[host] = self._policy.refusal(host)
            refusal = self._verdicts[host]
            if refusal is not None:
                raise BlockedAddress(refusal, request=request)
        session = self._session
        if session is None:
            session = self._session = self._open()
        try:
            body: bytes = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        try:
            response = await session.request(
                request.method, str(request.url), data=body or None,
                headers=request.headers.multi_items(), allow_redirects=False,
                timeout=_client_timeout(request))
        except _WIRE_ERRORS as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(
            status_code=response.status, headers=response.raw_headers,
            stream=_ResponseStream(response, request), request=request,
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1", "replace")})

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._dns is not None:
            await self._dns.close()
            self._dns = None
