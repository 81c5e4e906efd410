"""A connection through a forward proxy: TCP to the proxy, ``CONNECT`` for https, then TLS.

An ``https://`` endpoint is reached through a tunnel: ``CONNECT host:port``
to the proxy, a 2xx answer, then TLS with the endpoint itself inside it,
checked against the endpoint's own CA bundle and showing its own client
certificate, exactly as a direct connection would; the proxy sees only
ciphertext. An ``http://`` endpoint's connection is simply one to the
proxy, which gets absolute-form requests (``sender``).

The proxy is bounded as an endpoint is: the attempt's one deadline covers
the dial and the ``CONNECT`` answer (a proxy that never answers, or
dribbles its ``200 Connection established`` a byte at a time, costs no
more than the endpoint's ``--timeout``), and the answer is read by llhttp
with the limits of ``parse`` (64 KiB of head at most). A 2xx answer has no
body (RFC 9110, section 9.3.6): bytes after its head, before our TLS
hello, are refused.

The proxy's own failures are :class:`ProxyError`, a ``ConnectError``:
refused, closed, unreachable, answering anything but 2xx (407, 502, ...),
or malformed. The text names the proxy as :attr:`Proxy.shown` has it,
credentials masked. ``--block-private-networks`` does not apply to the
proxy's address: it is the operator's choice, and usually a private one.
A deadline that passes while the proxy is still being dialled or asked
leaves :func:`waiting_for` set, so that the sender reports a ``connect``
failure naming the proxy rather than a timeout of the endpoint.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from contextvars import ContextVar

import httpx

from dispatcher.http.connection import Connection
from dispatcher.http.dial import DialLimit, attach, connect_socket
from dispatcher.http.parse import ResponseParser
from dispatcher.http.proxy import Proxy
from dispatcher.http.resolve import Resolver

_READ = 16 * 1024
_WAITING: ContextVar[str | None] = ContextVar("proxy_waiting", default=None)


class ProxyError(httpx.ConnectError):
    """The proxy refused, failed or garbled the connection: the message names it."""


def waiting_for() -> str | None:
    """What the current attempt was waiting for from a proxy when it stopped; None: nothing."""
    return _WAITING.get()


def new_attempt() -> None:
    """Forget what an earlier attempt of this task waited for (a look first: setting a
    context variable costs a copy of the context, and almost no attempt needs it)."""
    if _WAITING.get() is not None:
        _WAITING.set(None)


async def open_through(conn: Connection, proxy: Proxy, host: str, port: int, *,
                       tls: ssl.SSLContext | None, resolve: Resolver,
                       dials: DialLimit | None = None, tls_note: str = "") -> None:
    """Connect ``conn`` to ``host:port`` through ``proxy`` (a tunnel when ``tls``)."""
    _WAITING.set(f"proxy {proxy} did not accept a connection")
    try:
        sock = await connect_socket(proxy.host, proxy.port, policy=None, resolve=resolve,
                                    dials=dials)
    except httpx.ConnectError as exc:
        raise ProxyError(f"proxy {proxy}: {exc}") from exc
    try:
        if tls is not None:
            _WAITING.set(f"proxy {proxy} did not open a tunnel to {_authority(host, port)}")
            await _tunnel(sock, proxy, host, port)
    except BaseException:
        sock.close()
        raise
    _WAITING.set(None)
    await attach(conn, sock, host, port, tls=tls, tls_note=f"{tls_note} (through proxy {proxy})")


async def _tunnel(sock: socket.socket, proxy: Proxy, host: str, port: int) -> None:
    """Ask the proxy for a tunnel to ``host:port`` on ``sock``; return once it is open."""
    loop = asyncio.get_running_loop()
    authority = _authority(host, port).encode("ascii")
    request = b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n" % (authority, authority)
    if proxy.authorization is not None:
        request += b"proxy-authorization: %s\r\n" % proxy.authorization
    request += b"\r\n"
    where = f"proxy {proxy}"
    try:
        await loop.sock_sendall(sock, request)
        # An answer to CONNECT ends with its head, as one to HEAD does.
        parser = ResponseParser(head_request=True)
        tail = b""
        while not parser.head_done:
            data = await loop.sock_recv(sock, _READ)
            if not data:
                parser.feed_eof()
            parser.feed(data)
            tail = (tail + data)[-4:]
    except httpx.RemoteProtocolError as exc:
        raise ProxyError(f"{where}: {exc} to CONNECT {authority.decode()}") from exc
    except httpx.ReadError as exc:
        raise ProxyError(f"{where}: {exc} (asked to CONNECT {authority.decode()})") from exc
    except OSError as exc:
        raise ProxyError(f"{where}: {exc.strerror or exc} (asked to CONNECT "
                         f"{authority.decode()})") from exc
    if not 200 <= parser.status < 300:
        reason = parser.reason.decode("latin-1", "replace")[:100]
        raise ProxyError(f"{where} refused a tunnel to {authority.decode()}: "
                         f"{parser.status} {reason}".rstrip())
    if tail != b"\r\n\r\n":
        raise ProxyError(f"{where}: bytes after its answer to CONNECT, before TLS began")


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
