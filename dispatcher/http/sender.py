"""One HTTP delivery attempt: POST, a capped look at the answer, never an exception.

``HttpSender`` is made once per dispatcher process and shared by every
delivery task. It writes the request as bytes, the head's unchanging part
made once per URL, and our own HTTP/1.1 client (``dispatcher.http.transport``)
sends it and reads back the status, the headers and a capped body: no
request or response objects at all (BENCHMARKS.md, "The hot path"). httpx
does two jobs here: it parses URLs (``httpx.URL``) and supplies the
exception classes the transport raises, by which an error is classified.

The attempt has one total deadline covering connect, send and the whole
response: a read timeout that restarts on every read would let a server
dripping one byte a second hold a delivery forever.

Whatever goes wrong becomes an ``AttemptResult`` with an ``error_kind``
(``timeout``, ``connect``, ``blocked``, ``other``; ``internal`` when this
process ran out of file descriptors) and a short text that never carries the
request's headers (signatures) or body, nor the URL's credentials or query.
A URL with credentials (``user:password@``, which ``outbox endpoints add``
refuses) is not sent at all: ``other``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from dispatcher.http import tunnel
from dispatcher.http.deadlines import Deadlines
from dispatcher.http.netguard import NetworkPolicy
from dispatcher.http.proxy import Proxy, ProxyRoutes
from dispatcher.http.transport import BlockedAddress, DescriptorsExhausted, H1Transport, PoolKey
from dispatcher.policy.model import AttemptResult, ErrorKind, TlsFiles
from outbox._shared.urls import shown_url

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
                 transport: H1Transport | None = None,
                 proxies: ProxyRoutes | None = None) -> None:
        """Raises ValueError, with a message for the user, for a bad ``allow_networks`` entry.

        ``max_connections_per_host`` defaults to ``max_connections``;
        ``transport`` is one tuned for a test (its resolver, CAs or limits),
        and the policy is then the one it was given; ``proxies``: the proxies
        requests go through, and the hosts that skip them (none: all direct).
        """
        self._proxies = proxies if proxies else None
        self._deadlines = Deadlines()  # one timer for every attempt's deadline
        policy = NetworkPolicy.build(block_private_networks, allow_networks)  # checked always
        self.transport = transport or H1Transport(
            max_connections=max_connections,
            max_connections_per_host=max_connections_per_host or max_connections,
            policy=policy)
        # identity: the excerpt is read raw, and a compressed bomb stays small.
        self._defaults = (("user-agent", user_agent), ("accept", "*/*"),
                          ("accept-encoding", "identity"))
        self._targets: OrderedDict[str, _Target] = OrderedDict()
        self._default_names = frozenset(name for name, _ in self._defaults)

    async def send(self, url: str, headers: Sequence[tuple[str, str]], body: bytes,
                   timeout: float,  # noqa: ASYNC109 - applied inside
                   tls: TlsFiles | None = None, *, guarded: bool = False) -> AttemptResult:
        """POST ``body`` to ``url``; the outcome, within ``timeout`` seconds overall.

        ``tls``: the endpoint's own CA bundle and client certificate (None: the defaults);
        ``guarded``: the endpoint was saved with its URL checked, and the private-network
        guard applies to it whatever ``--block-private-networks`` says.
        """
        started = time.monotonic()
        tunnel.new_attempt()
        deadline = self._deadlines.start(timeout)
        try:
            return await self._post(url, headers, body, started, tls, guarded=guarded)
        except asyncio.CancelledError:
            if not deadline.timed_out():
                raise
            return _timed_out(timeout, started)
        except TimeoutError:
            return _timed_out(timeout, started)
        except Exception as exc:  # an attempt reports, it never raises
            kind, error = _classified(exc, url)
            if kind == "connect" and (tls is None or tls.client_cert is None):
                error += _certificate_hint(url, error)
            return _failed(kind, error, started)
        finally:
            self._deadlines.end(deadline)

    async def _post(self, url: str, headers: Sequence[tuple[str, str]], body: bytes,
                    started: float, tls: TlsFiles | None, *,
                    guarded: bool) -> AttemptResult:
        """The request as bytes through our own transport."""
        target = self._target(url)
        key = target.key if tls is None and not guarded else target.key._replace(
            tls=tls, guarded=guarded)
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
        if len(body) <= _JOINED_BODY:  # one buffer, one write
            payload, apart = b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body), b""
        else:  # a large body is not copied behind its head
            payload, apart = b"%scontent-length: %d\r\n\r\n" % (head, len(body)), body
        status, raw, excerpt, reason, resent = await self.transport.post(
            key, payload, BODY_EXCERPT_BYTES, apart)
        if status == 407 and key.proxy is not None:
            # Only a proxy asks for its credentials: its failure, retried, not the endpoint's
            # refusal (which a 4xx would be, dead-lettered at once).
            raise tunnel.ProxyError(f"proxy {key.proxy} refused the request: 407 Proxy "
                                    "Authentication Required")
        return AttemptResult(
            status=status,
            headers={n.decode("latin-1").lower(): v.decode("latin-1") for n, v in raw},
            body_excerpt=excerpt.decode("utf-8", "replace"),
            duration=time.monotonic() - started,
            reason=reason.decode("latin-1"), resent=resent)

    def _target(self, url: str) -> _Target:
        """Where a URL's requests go, and the unchanging start of their head, cached
        (see _URL_CACHE_SIZE); a URL that cannot be sent raises, uncached."""
        target = self._targets.get(url)
        if target is not None:
            self._targets.move_to_end(url)
            return target
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise httpx.UnsupportedProtocol(f"not an http(s) URL: {_redacted(parsed)}")
        if parsed.userinfo:
            raise httpx.UnsupportedProtocol(
                f"a URL with a user name or password is not sent: {_redacted(parsed)} "
                "(send credentials in an Authorization header)")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        host = parsed.raw_host.decode("ascii")
        proxy = self._proxies.proxy_for(parsed.scheme, host, port) if self._proxies else None
        start = _request_start(parsed, proxy)
        defaults = "".join(f"{name}: {value}\r\n" for name, value in self._defaults).encode()
        target = _Target(PoolKey(parsed.scheme, host, port, None, proxy), start,
                         start + defaults)
        if len(self._targets) >= _URL_CACHE_SIZE:
            self._targets.popitem(last=False)
        self._targets[url] = target
        return target

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self.transport.aclose()


@dataclass(frozen=True, slots=True)
class _Target:
    key: PoolKey  # scheme, host, port: the pool's key
    start: bytes  # request line and host, each ending CRLF
    head: bytes   # the same and the default headers


def _request_start(url: httpx.URL, proxy: Proxy | None) -> bytes:
    """The request line and host of a POST to ``url``: origin-form, or absolute-form with the
    proxy's credentials for an http:// URL sent through a proxy (https goes in a tunnel)."""
    path = url.raw_path.decode("ascii")
    netloc = url.netloc.decode("ascii")
    if proxy is None or url.scheme != "http":
        return f"POST {path} HTTP/1.1\r\nhost: {netloc}\r\n".encode("ascii")
    start = f"POST http://{netloc}{path} HTTP/1.1\r\nhost: {netloc}\r\n".encode("ascii")
    if proxy.authorization is not None:
        start += b"proxy-authorization: %s\r\n" % proxy.authorization
    return start


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


# What a server that requires a client certificate does to a client without one: TLS
# 1.3 sends the alert certificate_required (116) once the handshake is over, or
# closes or resets before answering (a reset can overtake the alert); TLS 1.2
# fails the handshake (handshake_failure, or a reset or close mid-handshake).
_CERTIFICATE_REFUSALS = ("without a response", "during the TLS handshake",
                         "certificate required", "handshake failure", "EOF occurred")


def _certificate_hint(url: str, error: str) -> str:
    """A hint to an https endpoint sent without a client certificate whose server hung up
    around the handshake: the likeliest cause there is a certificate it requires."""
    if not url.lower().startswith("https:"):
        return ""
    lowered = error.lower()
    if not any(sign.lower() in lowered for sign in _CERTIFICATE_REFUSALS):
        return ""
    return ("; the server may require a client certificate: give the endpoint "
            "--client-cert and --client-key")


def _timed_out(timeout: float, started: float) -> AttemptResult:
    """The attempt's deadline passed: the endpoint's fault, or its proxy's."""
    waiting = tunnel.waiting_for()
    if waiting is not None:  # the proxy's fault, not the endpoint's
        return _failed("connect", f"{waiting} within {timeout:g} s", started)
    return _failed("timeout", f"no complete response within {timeout:g} s", started)


def _failed(kind: ErrorKind, error: str, started: float) -> AttemptResult:
    return AttemptResult(error_kind=kind, error=error, duration=time.monotonic() - started)


def _redacted(url: httpx.URL) -> str:
    """The URL as every page and command shows it (credentials, query values, fragment and
    token-like path segments masked), fit for ``last_error``."""
    return shown_url(str(url))


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
