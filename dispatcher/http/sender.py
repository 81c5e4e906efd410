"""One HTTP delivery attempt: POST, a capped look at the answer, never an exception.

``HttpSender`` is made once per dispatcher process and shared by every
delivery task. On our own HTTP/1.1 client (``dispatcher.http.transport``,
the production wire) it writes the request as bytes, the head's unchanging
part made once per URL, and reads back the status, the headers and a capped
body: no request or response objects at all (BENCHMARKS.md, "The hot path").
Any other transport (a respx router, in tests) gets httpx's transport API,
``httpx.Request`` in, ``httpx.Response`` out, built as lean as httpx allows;
both kinds raise httpx's exceptions, so what follows is the same.

The attempt has one total deadline covering connect, send and the whole
response: httpx's read timeout restarts on every read, so a server dripping
one byte a second would otherwise hold a delivery forever.

Whatever goes wrong becomes an ``AttemptResult`` with an ``error_kind``
(``timeout``, ``connect``, ``blocked``, ``other``; ``internal`` when this
process ran out of file descriptors) and a short text that never carries the
request's headers (signatures) or body.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast

import httpx

from dispatcher.http.netguard import NetworkPolicy
from dispatcher.http.transport import (
    BlockedAddress,
    DescriptorsExhausted,
    H1Transport,
    PoolKey,
    ReadBody,
)
from dispatcher.policy.model import AttemptResult, ErrorKind

# How much of a response body we read and keep: enough for an error message,
# never megabytes from a misbehaving endpoint.
BODY_EXCERPT_BYTES = 4096
_ERROR_TEXT_CHARS = 300
_JOINED_BODY = 64 * 1024
"""Bodies up to this size are sent in one buffer with their head; larger ones apart."""
_URL_CACHE_SIZE = 16384
"""URLs whose parsed form is kept (least recently used out first): a webhook sender posts
to an endpoint per customer, and parsing a URL costs more than the rest of a request's
head. About 300 bytes each."""


class HttpSender:
    """The dispatcher's HTTP client: keep-alive, bounded pools, no redirects, no env."""

    def __init__(self, max_connections: int, block_private_networks: bool,
                 allow_networks: Sequence[str], user_agent: str, *,
                 max_connections_per_host: int | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        """Raises ValueError, with a message for the user, for a bad ``allow_networks`` entry.

        ``max_connections_per_host`` defaults to ``max_connections``;
        ``transport`` replaces the network in tests (a respx router).
        """
        self.policy = NetworkPolicy.build(block_private_networks, allow_networks)
        self.transport = transport or H1Transport(
            max_connections=max_connections,
            max_connections_per_host=max_connections_per_host or max_connections,
            policy=self.policy)
        # identity: the excerpt is read raw, and a compressed bomb stays small.
        self._defaults = (("user-agent", user_agent), ("accept", "*/*"),
                          ("accept-encoding", "identity"))
        self._urls: OrderedDict[str, tuple[httpx.URL, str]] = OrderedDict()
        self._targets: OrderedDict[str, _Target] = OrderedDict()
        self._default_names = frozenset(name for name, _ in self._defaults)

    async def send(self, url: str, headers: Sequence[tuple[str, str]], body: bytes,
                   timeout: float) -> AttemptResult:  # noqa: ASYNC109 - applied inside
        """POST ``body`` to ``url``; the outcome, within ``timeout`` seconds overall."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                attempt = self._post if isinstance(self.transport, H1Transport) else self._attempt
                return await attempt(url, headers, body, started)
        except TimeoutError:
            return _failed("timeout", f"no complete response within {timeout:g} s", started)
        except Exception as exc:  # an attempt reports, it never raises
            return _failed(*_classified(exc, url), started)

    async def _attempt(self, url: str, headers: Sequence[tuple[str, str]], body: bytes,
                       started: float) -> AttemptResult:
        parsed, host = self._parse(url)
        given = {name.lower() for name, _ in headers}
        framed = [*(h for h in (("host", host), *self._defaults) if h[0] not in given), *headers]
        if "content-length" not in given:
            framed.append(("content-length", str(len(body))))
        # stream= rather than content=: the same request without httpx rebuilding
        # its headers twice to add Host and Content-Length, which we just did.
        request = httpx.Request("POST", parsed, headers=framed, stream=httpx.ByteStream(body))
        request.read()  # .content, as respx and our transport read it
        response = await self.transport.handle_async_request(request)
        try:
            excerpt = await _read_capped(response)
        finally:
            await response.aclose()  # an unread rest closes the connection
        return AttemptResult(
            status=response.status_code,
            headers=dict(response.headers.items()),
            body_excerpt=excerpt.decode("utf-8", "replace"),
            duration=time.monotonic() - started)

    async def _post(self, url: str, headers: Sequence[tuple[str, str]], body: bytes,
                    started: float) -> AttemptResult:
        """The hot path: the request as bytes through our own transport."""
        target = self._target(url)
        if target.fallback:  # credentials in the URL: httpx's way (sent as Basic auth)
            return await self._attempt(url, headers, body, started)
        head = target.head
        if headers:
            names = {name.lower() for name, _ in headers}
            if not names.isdisjoint(self._default_names):  # a default overridden
                head = target.start + b"".join(
                    b"%s: %s\r\n" % (n.encode(), v.encode())
                    for n, v in self._defaults if n not in names)
            extra = "".join(f"{name}: {value}\r\n" for name, value in headers).encode("latin-1")
            # One CRLF per line and none inside: a value cannot start a new header.
            if extra.count(b"\n") != len(headers) or extra.count(b"\r") != len(headers):
                raise httpx.LocalProtocolError("a header contains CR or LF")
            head += extra
        assert isinstance(self.transport, H1Transport)
        if len(body) <= _JOINED_BODY:  # one buffer, one write
            payload, apart = b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body), b""
        else:  # a large body is not copied behind its head
            payload, apart = b"%scontent-length: %d\r\n\r\n" % (head, len(body)), body
        status, raw, excerpt = await self.transport.post(target.key, payload,
                                                         BODY_EXCERPT_BYTES, apart)
        return AttemptResult(
            status=status,
            headers={n.decode("latin-1").lower(): v.decode("latin-1") for n, v in raw},
            body_excerpt=excerpt.decode("utf-8", "replace"),
            duration=time.monotonic() - started)

    def _target(self, url: str) -> _Target:
        """Where a URL's requests go, and the unchanging start of their head, cached."""
        target = self._targets.get(url)
        if target is not None:
            self._targets.move_to_end(url)
        else:
            parsed, host = self._parse(url)
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
            start = f"POST {parsed.raw_path.decode('ascii')} HTTP/1.1\r\nhost: {host}\r\n"
            defaults = "".join(f"{name}: {value}\r\n" for name, value in self._defaults)
            target = _Target((parsed.scheme, parsed.raw_host.decode("ascii"), port),
                             start.encode("ascii"), (start + defaults).encode("ascii"),
                             fallback=bool(parsed.userinfo))
            if len(self._targets) >= _URL_CACHE_SIZE:
                self._targets.popitem(last=False)
            self._targets[url] = target
        return target

    def _parse(self, url: str) -> tuple[httpx.URL, str]:
        """The parsed URL and its Host header, cached (see _URL_CACHE_SIZE)."""
        cached = self._urls.get(url)
        if cached is not None:
            self._urls.move_to_end(url)
        else:
            parsed = httpx.URL(url)
            if parsed.scheme not in ("http", "https") or not parsed.host:
                raise httpx.UnsupportedProtocol(f"not an http(s) URL: {_redacted(parsed)}")
            if len(self._urls) >= _URL_CACHE_SIZE:
                self._urls.popitem(last=False)
            cached = self._urls[url] = (parsed, parsed.netloc.decode("ascii"))
        return cached

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self.transport.aclose()


@dataclass(frozen=True, slots=True)
class _Target:
    key: PoolKey  # scheme, host, port: the pool's key
    start: bytes  # request line and host, each ending CRLF
    head: bytes   # the same and the default headers
    fallback: bool = False


async def _read_capped(response: httpx.Response) -> bytes:
    """The first BODY_EXCERPT_BYTES of the body as sent (no decompression: no bombs)."""
    if isinstance(response.stream, ReadBody):  # ours, read with the head: no iteration
        return response.stream.body[:BODY_EXCERPT_BYTES]
    if response.is_stream_consumed:  # a mock transport may hand over a read response
        return response.content[:BODY_EXCERPT_BYTES]
    excerpt = bytearray()
    # aiter_raw is an async generator: close it when we stop early.
    raw = cast("AsyncGenerator[bytes, None]", response.aiter_raw())
    async with aclosing(raw) as chunks:
        async for chunk in chunks:
            excerpt += chunk
            if len(excerpt) >= BODY_EXCERPT_BYTES:
                break
    return bytes(excerpt[:BODY_EXCERPT_BYTES])


def _classified(exc: Exception, url: str) -> tuple[ErrorKind, str]:
    """The error kind of an exception, and its short text."""
    if isinstance(exc, DescriptorsExhausted):  # ours, not the endpoint's
        return "internal", f"internal error in the dispatcher: {exc.strerror}"
    if isinstance(exc, BlockedAddress):
        kind: ErrorKind = "blocked"
    elif isinstance(exc, httpx.TimeoutException):
        kind = "timeout"
    elif isinstance(exc, httpx.ConnectError | httpx.ReadError | httpx.WriteError):
        kind = "connect"
    else:
        kind = "other"
    return kind, _describe(exc, url)


def _failed(kind: ErrorKind, error: str, started: float) -> AttemptResult:
    return AttemptResult(error_kind=kind, error=error, duration=time.monotonic() - started)


def _redacted(url: httpx.URL) -> str:
    """The URL without credentials, query or fragment, fit for ``last_error``."""
    return str(url.copy_with(userinfo=b"", query=None, fragment=None))


def _describe(exc: BaseException, url: str) -> str:
    """One short line about ``exc``; a URL's credentials and query are not repeated."""
    text = " ".join((str(exc) or type(exc).__name__).split())
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        parsed = None
    if parsed is not None and (parsed.userinfo or parsed.query):
        text = text.replace(url, _redacted(parsed)).replace(str(parsed), _redacted(parsed))
        for secret in (parsed.password, parsed.query.decode("ascii", "replace")):
            if secret:
                text = text.replace(secret, "***")
    return text[:_ERROR_TEXT_CHARS]
