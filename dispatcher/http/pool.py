"""The transport's keep-alive pool: which connection a request gets, and when it waits.

Idle connections are kept per (scheme, host, port), most recently used on
top, so that traffic settles on few warm connections and the rest expire.
At most ``max_connections`` are open in all, ``max_connections_per_host``
to one key; at the limit a request closes the longest-idle connection that
makes room, or waits for one to be released. A connection idle longer than
``keepalive`` is closed, by one timer for the whole pool rather than one per
connection.

A server closes an idle connection when its own timeout is up, and a
request sent on it just then is lost on the way (the transport sends it
again, once, on a new connection). To make that rare, the pool lets a
connection go before the server would: when the answer's ``Keep-Alive``
header says ``timeout=N``, the connection is kept idle at most N less a
margin (``_early``); when it says ``max=M``, with M at most 1, it is not
reused. Before a connection is reused for the first time, or after it idled
``HANGS_UP_WITHIN`` or longer, the kernel is asked whether the server has
closed it meanwhile (``Connection.stirred``, one peek at the socket): a
close the event loop has not read yet. Not on every reuse: under load a
connection goes from one request to the next within microseconds, and the
peek's system call would cost a tenth of a request's CPU (BENCHMARKS.md,
"Behind real servers").

Some servers say ``keep-alive`` and close the connection right after
answering (or after a few answers): the peek sees most of those closes, but
not one still on its way. A server seen closing a connection within
``HANGS_UP_WITHIN`` of its answer is taken at its deed: for ``DISTRUST``
seconds its connections are not kept, each request gets a new one, and then
the pool tries again.

Accounting has one door: ``drop`` closes a connection and forgets it, and
doing it twice is harmless, so every path that gives up on a connection
(error, cancellation, EOF while idle) just calls it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Final

from dispatcher.http.connection import Connection, PoolKey

Opener = Callable[[Connection], Awaitable[None]]  # connects a new Connection to its key

_HINT = re.compile(rb"(?i)\b(timeout|max)\s*=\s*(\d{1,9})")
"""``timeout=5, max=100`` in a ``Keep-Alive`` header (RFC 2068 section 19.7.1.1)."""
HANGS_UP_WITHIN: Final = 0.1
"""Seconds: a connection the server closed sooner after answering was closed because it
answered, whatever its ``Connection`` header said (no server's idle timeout is this short)."""
DISTRUST: Final = 60.0
"""Seconds a server that closed a connection right after answering gets new connections."""


class Pool:
    """Connections by key, within the limits; ``acquire``, then ``release`` or ``drop``."""

    def __init__(self, max_connections: int, max_per_host: int, keepalive: float) -> None:
        self._max = max_connections
        self._max_per_host = max_per_host or max_connections
        self._keepalive = keepalive
        self._idle: dict[PoolKey, list[Connection]] = {}  # most recently used last
        self._open: dict[PoolKey, int] = {}
        self._all: set[Connection] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._sweeper: asyncio.TimerHandle | None = None
        self._hangs_up: dict[PoolKey, float] = {}  # until when its connections are not kept

    def idle_count(self) -> int:
        """Idle connections still open."""
        return sum(conn.alive() for stack in self._idle.values() for conn in stack)

    async def acquire(self, key: PoolKey, open_new: Opener, *,
                      fresh: bool = False) -> tuple[Connection, bool]:
        """An idle connection to ``key`` (reused: True), else a new one; waits at the limits.

        ``fresh`` skips the idle ones. Raises whatever ``open_new`` raises; the
        caller's deadline bounds the waits.
        """
        while True:
            if not fresh:
                conn = self._take_idle(key)
                if conn is not None:
                    return conn, True
            if len(self._all) < self._max and self._open.get(key, 0) < self._max_per_host:
                return await self._connect(key, open_new), False
            if not self._evict(key):
                await self._wait_for_room()

    def release(self, conn: Connection) -> None:
        """Back to the pool if its request was written and its response read whole; else closed."""
        parser = conn.parser
        if parser is None or not conn.reusable():
            self.drop(conn)
            return
        keepalive = self._keepalive
        if parser.keep_alive_hint is not None:  # the server says how long it keeps it
            keepalive = _early(parser.keep_alive_hint, keepalive)
            if keepalive <= 0:
                self.drop(conn)
                return
        loop = asyncio.get_running_loop()
        if self._hangs_up and self._hangs_up.get(conn.key, 0.0) > loop.time():
            self.drop(conn)
            return
        conn.parser = None
        conn.resume()
        conn.idle = True
        conn.idle_since = loop.time()
        conn.keepalive = keepalive
        self._idle.setdefault(conn.key, []).append(conn)
        if self._sweeper is None:
            self._sweeper = loop.call_later(keepalive, self._sweep)
        if self._waiters:
            self._wake_waiters()

    def hung_up(self, conn: Connection, idled: float) -> None:
        """The server closed ``conn``, idle for ``idled`` seconds (or as it was reused after
        them): drop it, and if that was a moment only (``HANGS_UP_WITHIN``), keep no
        connection to its server for a while."""
        if idled < HANGS_UP_WITHIN:
            now = asyncio.get_running_loop().time()
            if len(self._hangs_up) > 1:
                self._hangs_up = {k: t for k, t in self._hangs_up.items() if t > now}
            self._hangs_up[conn.key] = now + DISTRUST
        self.drop(conn)

    def drop(self, conn: Connection) -> None:
        """Close ``conn`` and forget it; a no-op the second time."""
        if conn.idle:
            conn.idle = False
            self._idle[conn.key].remove(conn)
        conn.abort()
        if conn in self._all:
            self._all.discard(conn)
            left = self._open[conn.key] - 1
            if left:
                self._open[conn.key] = left
            else:
                del self._open[conn.key]
            if self._waiters:
                self._wake_waiters()

    def close(self) -> None:
        """Close every connection, idle or in use."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self._all):
            self.drop(conn)
        self._idle.clear()

    def _take_idle(self, key: PoolKey) -> Connection | None:
        stack = self._idle.get(key)
        if not stack:
            return None
        now = asyncio.get_running_loop().time()
        while stack:
            conn = stack.pop()
            conn.idle = False
            idled = now - conn.idle_since
            if idled >= conn.keepalive:
                self.drop(conn)  # expired
            elif not conn.alive() or (
                    (idled >= HANGS_UP_WITHIN or not conn.reused) and conn.stirred()):
                self.hung_up(conn, idled)  # closed by the server while idle
            else:
                conn.reused, conn.idled = True, idled
                return conn
        return None

    async def _connect(self, key: PoolKey, open_new: Opener) -> Connection:
        conn = Connection(key, self._lost)
        self._all.add(conn)  # counted from now: concurrent requests see the slot taken
        self._open[key] = self._open.get(key, 0) + 1
        try:
            await open_new(conn)
        except BaseException:
            self.drop(conn)
            raise
        return conn

    def _lost(self, conn: Connection) -> None:
        """A connection's transport closed (by the server, or by ``drop``)."""
        if conn.idle:
            self.hung_up(conn, asyncio.get_running_loop().time() - conn.idle_since)
        else:
            self.drop(conn)

    def _evict(self, key: PoolKey) -> bool:
        """Close the longest-idle connection whose slot ``key`` can use; False if none."""
        if self._open.get(key, 0) >= self._max_per_host:
            stacks = [self._idle.get(key, [])]
        else:
            stacks = list(self._idle.values())
        candidates = [stack[0] for stack in stacks if stack]
        if not candidates:
            return False
        self.drop(min(candidates, key=lambda conn: conn.idle_since))
        return True

    async def _wait_for_room(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wake_waiters(self) -> None:
        """Every waiter looks again (rare: the dispatcher caps requests at the pool size)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _sweep(self) -> None:
        """Close the connections idle past the expiry; come back when the next one is due."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due: list[float] = []
        for key, stack in list(self._idle.items()):
            # A key's connections share their server's hint: the oldest expires first.
            while stack and now - stack[0].idle_since >= stack[0].keepalive:
                self.drop(stack[0])
            if stack:
                due.append(stack[0].idle_since + stack[0].keepalive)
            else:
                del self._idle[key]
        if due:
            self._sweeper = loop.call_at(min(due), self._sweep)


def _early(hint: bytes, keepalive: float) -> float:
    """Seconds a connection may stay idle, given the server's ``Keep-Alive`` header and our
    own ``keepalive``: ``timeout=N`` less a margin (half of it, at most a second: the
    answer took time to arrive, and the server's clock started when it sent it), and 0 when
    ``max=`` allows at most one more request (the server may close after it; we take none)."""
    for name, value in _HINT.findall(hint):
        number = int(value)
        if name.lower() == b"max":
            if number <= 1:
                return 0.0
        else:
            keepalive = min(keepalive, number - min(1.0, number / 2))
    return keepalive
