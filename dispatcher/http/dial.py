"""Opening a connection for ``dispatcher.http.transport``: DNS, the SSRF guard, TCP, then TLS.

Names are looked up by the resolver given (``resolve.HostResolver`` unless
a test brings its own).

The SSRF rule of ``netguard`` holds here: with the policy on, an IP-literal
host is judged before anything else, a host name is resolved once, every
address it resolves to is checked, and the socket connects only to an
address that passed, so a rebinding DNS server gets no second say.

When a name has several addresses they race as RFC 8305 ("Happy Eyeballs")
describes, as aiohttp and asyncio do: families interleaved, one more attempt
every 250 ms or as soon as one fails, the first connected wins. A host whose
IPv6 address is unreachable then still answers over IPv4 within the
deadline.

Whoever runs an endpoint's domain chooses how many addresses it has, and a
socket to a silent address stays open until the deadline: a name with 100
addresses once opened an attempt every 250 ms and took every descriptor of
the process. So the race has bounds: ``ATTEMPTS_RACING`` attempts at once
for one connection (the next starts when one fails), the first
``ADDRESSES_PER_FAMILY`` addresses of each family, and ``DialLimit``, a
ceiling on the sockets connecting at once in the whole process (one per
transport; a dial waits for room within its deadline).

Running out of descriptors (``EMFILE``, ``ENFILE``) while looking up or
connecting is the dispatcher's own trouble, not the endpoint's: it raises
``DescriptorsExhausted``, which is no ``ConnectError``, so the attempt is
not charged to the endpoint as a failed connection nor counted by its
circuit breaker.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import ssl

import httpx

from dispatcher.http.connection import Connection
from dispatcher.http.netguard import NetworkPolicy
from dispatcher.http.resolve import AddrInfo, Resolver

_ATTEMPT_DELAY = 0.25  # seconds before racing the next address (RFC 8305: 250 ms)
ATTEMPTS_RACING = 2
ADDRESSES_PER_FAMILY = 4
DIALS_IN_FLIGHT = 256
_OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE})


class BlockedAddress(httpx.ConnectError):
    """The network policy refused to connect to this host."""


class DescriptorsExhausted(OSError):
    """This process (or the system) has no file descriptor left: our trouble, not the host's."""


class DialLimit:
    """The sockets connecting at once, in the whole process: at most ``limit``."""

    def __init__(self, limit: int = DIALS_IN_FLIGHT) -> None:
        self.limit = limit
        self.in_flight = 0
        self._room = asyncio.Semaphore(limit)

    async def dial(self, info: AddrInfo) -> socket.socket:
        """A socket connected to ``info``'s address, once the ceiling leaves room."""
        async with self._room:
            self.in_flight += 1
            try:
                return await _dial(info)
            finally:
                self.in_flight -= 1


def out_of_files(exc: BaseException) -> bool:
    """Whether ``exc`` says that no file descriptor was left."""
    return isinstance(exc, OSError) and exc.errno in _OUT_OF_FILES


async def open_connection(conn: Connection, host: str, port: int, *, tls: ssl.SSLContext | None,
                          policy: NetworkPolicy | None, resolve: Resolver,
                          dials: DialLimit | None = None, tls_note: str = "") -> None:
    """Connect ``conn`` to ``host``: a checked address that answers first, TLS on top."""
    sock = await connect_socket(host, port, policy=policy, resolve=resolve, dials=dials)
    await attach(conn, sock, host, port, tls=tls, tls_note=tls_note)


async def connect_socket(host: str, port: int, *, policy: NetworkPolicy | None,
                         resolve: Resolver, dials: DialLimit | None = None) -> socket.socket:
    """A TCP socket connected to ``host:port``, to an address the policy (if any) allows."""
    refusal = policy.refusal(host) if policy is not None else None
    if refusal is not None:
        raise BlockedAddress(refusal)
    infos = await _addresses(host, port, resolve)
    if policy is not None and not policy.host_allowed(host):
        allowed = [info for info in infos if policy.address_allowed(info[4][0])]
        if not allowed:
            addresses = ", ".join(sorted({str(info[4][0]) for info in infos})) or "no address"
            raise BlockedAddress(f"{host} resolves only to private or internal addresses"
                                 f" ({addresses})")
        infos = allowed
    if not infos:
        raise httpx.ConnectError(f"cannot resolve {host}: no address")
    try:
        return await _first_to_connect(infos, dials or DialLimit())
    except DescriptorsExhausted:
        raise
    except OSError as exc:
        failure = httpx.ConnectTimeout if isinstance(exc, TimeoutError) else httpx.ConnectError
        raise failure(f"cannot connect to {host}:{port}: {exc}") from exc


async def attach(conn: Connection, sock: socket.socket, host: str, port: int, *,
                 tls: ssl.SSLContext | None, tls_note: str = "") -> None:
    """Make ``sock`` the transport of ``conn``, with TLS to ``host`` on top when ``tls``.

    ``tls_note`` follows the error of a handshake that fails (which CA
    bundle was trusted, which proxy carried it). The socket is closed
    unless a transport took it.
    """
    try:
        await asyncio.get_running_loop().create_connection(
            lambda: conn, sock=sock, ssl=tls, server_hostname=host if tls else None)
    except OSError as exc:  # TLS refused (certificate, name, handshake)
        # A reset or a close mid-handshake carries no text of its own.
        why = str(exc) or (f"the server {_ENDED.get(type(exc), 'closed the connection')} "
                           "during the TLS handshake")
        raise httpx.ConnectError(f"cannot connect to {host}:{port}: {why}{tls_note}") from exc
    finally:
        if conn.transport is None:  # the transport owns the socket once it exists
            sock.close()
        else:
            conn.sock = sock


_ENDED: dict[type[OSError], str] = {ConnectionResetError: "reset the connection",
                                     ConnectionAbortedError: "aborted the connection"}


async def _addresses(host: str, port: int, resolve: Resolver) -> list[AddrInfo]:
    """Where ``host`` is: the address it is written as, else what the resolver says."""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        try:
            return await resolve(host, port)
        except OSError as exc:
            if out_of_files(exc):
                raise DescriptorsExhausted(exc.errno, f"cannot resolve {host}: {exc}") from exc
            raise httpx.ConnectError(f"cannot resolve {host}: {exc}") from exc
    family = int(socket.AF_INET if literal.version == 4 else socket.AF_INET6)
    return [(family, int(socket.SOCK_STREAM), socket.IPPROTO_TCP, "", (host, port))]


async def _first_to_connect(infos: list[AddrInfo], dials: DialLimit) -> socket.socket:
    """The socket of the first address to connect; the error if none does.

    At most ATTEMPTS_RACING attempts at once; the next starts 250 ms after
    the last one, or as soon as one fails when the race is full.
    """
    if len(infos) == 1:
        return await dials.dial(infos[0])
    queue = _interleaved(infos)
    running: set[asyncio.Task[socket.socket]] = set()
    errors: list[OSError] = []
    winner: socket.socket | None = None
    try:
        while winner is None and (queue or running):
            if queue and len(running) < ATTEMPTS_RACING:
                running.add(asyncio.create_task(dials.dial(queue.pop(0))))
            room = bool(queue) and len(running) < ATTEMPTS_RACING
            done, running = await asyncio.wait(
                running, timeout=_ATTEMPT_DELAY if room else None,
                return_when=asyncio.FIRST_COMPLETED)
            winner = _settle(done, errors)
    finally:
        for task in running:
            task.cancel()
        for result in await asyncio.gather(*running, return_exceptions=True):
            if isinstance(result, socket.socket):  # connected as it was being cancelled
                result.close()
    if winner is not None:
        return winner
    texts = list(dict.fromkeys(str(error) for error in errors))
    if len(texts) == 1:
        raise errors[0]
    raise OSError("; ".join(texts))


def _settle(done: set[asyncio.Task[socket.socket]], errors: list[OSError]) -> socket.socket | None:
    """The first connected socket among finished attempts (others closed); failures noted."""
    winner: socket.socket | None = None
    for task in done:
        error = task.exception()
        if error is None:
            if winner is None:
                winner = task.result()
            else:
                task.result().close()
        elif isinstance(error, OSError) and not isinstance(error, DescriptorsExhausted):
            errors.append(error)
        else:
            if winner is not None:
                winner.close()
            raise error
    return winner


def _interleaved(infos: list[AddrInfo]) -> list[AddrInfo]:
    """The resolver's order, alternating address families from the first one's; the first
    ADDRESSES_PER_FAMILY of each family only."""
    first = infos[0][0]
    same = [info for info in infos if info[0] == first][:ADDRESSES_PER_FAMILY]
    other = [info for info in infos if info[0] != first][:ADDRESSES_PER_FAMILY]
    out: list[AddrInfo] = []
    for i in range(max(len(same), len(other))):
        out += same[i:i + 1] + other[i:i + 1]
    return out


async def _dial(info: AddrInfo) -> socket.socket:
    family, kind, proto, _, address = info
    try:
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        if out_of_files(exc):
            raise DescriptorsExhausted(exc.errno, f"no file descriptor left for a socket: "
                                                  f"{exc.strerror or exc}") from exc
        raise
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock
