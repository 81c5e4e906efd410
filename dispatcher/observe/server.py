"""The metrics and health server: ``GET /metrics``, ``/healthz`` and ``/readyz``.

A few dozen lines of HTTP/1.1 on asyncio's streams, in the
dispatcher's own event loop, so that it needs no dependency and no thread.
Each connection serves one request and is closed (``Connection: close``):
Prometheus and the kubelet ask every few seconds, so keep-alive would buy
nothing. Requests are small and bounded (8 KiB of head, 5 s to send it).

Connections are bounded too: at most ``MAX_CLIENTS`` at once, decided as
each is accepted. A client that connects beyond them closes another: an
answer overdue (still not taken after ``_OVERDUE``: its request was served,
its reader does not read), oldest first; else a connection silent for more
than ``_IDLE``; else one of its own kind, oldest first: silent if the
newcomer has sent nothing yet, speaking if it has (a byte of its request has
arrived, read or still in the kernel's buffer); else one of the other kind.
It is itself closed when every one is an answer in time. So a flood of idle
connections holds a few dozen descriptors, not all of the process's: it once
took every descriptor and with them every delivery. And a flood pushes out
its own kind: idle newcomers close idle connections, not a scrape whose
request has arrived, and a burst of scrapes closes scrapes, not a kubelet
probe in the instant between its connect and its request. (Ranking the
silent ones first, oldest first, once closed such a probe: accepted in one
turn with seven scrapes whose requests had arrived, it was the oldest that
had said nothing.) The listen backlog is small so that few connections are
accepted per turn of the loop.

Answers are bounded in time: each must leave the server, at its reader's
pace, within ``_WRITE_TIMEOUT`` (5 s, as long as a request may take to
arrive; Prometheus and the kubelet take a few kilobytes in milliseconds),
or the connection is reset: its unsent answer is thrown away, by the
kernel too (``SO_LINGER`` 0), rather than waited on, and its descriptor is
freed at once. No wait on a client's socket is without a deadline. Once an
answer is all in the kernel's hands the connection no longer counts
against the limit.

Room for the probes: ``/metrics`` answers (about 3.5 KB per endpoint, the only
ones that may not fit in a socket's buffers) hold at most ``MAX_SCRAPES``
of the slots at once. A scrape beyond them closes the oldest overdue one,
else is answered 503 at once. The other slots are then always held by
connections that are not yet answered, or whose answer (a few hundred
bytes) is handed over in the same turn of the loop: a newcomer can always
make room, and ``/healthz`` and ``/readyz`` are answered while slow readers
hold every scrape slot. A probe whose whole request has arrived is never
the one closed for a newcomer, even before the loop has read it: with
slow readers reconnecting as fast as they are dropped, the oldest connection
not yet answered was once the kubelet's. While another scrape's answer is
still on its way, a scrape is sent the text rendered for it (if less than a
second old) rather than a new render, and scrapes share a render under way:
rendering many endpoints takes seconds of CPU (in a thread, beside the
loop), and scrapers that never read must not buy a render each. (Once, 32
clients that asked for /metrics and never read held every connection for
good; the kubelet's probes went unanswered and it restarted the dispatcher
over and over.) Keeping the metrics port to
the scrapers and the kubelet (``deploy/kubernetes/networkpolicy.yaml``) is
the other half of the defence.

- ``/metrics`` first refreshes the backlog gauges through a short-lived
  database connection (``on_scrape``), bounded by ``scrape_timeout``. If the
  database is slow or down, the scrape still answers 200 with the counters,
  and the backlog as last measured (until it grows stale): a scrape must not
  fail because of what it is meant to report on.
- ``/healthz`` follows ``is_alive()`` ("the dispatch loop still turns"), so
  an orchestrator restarts a wedged process but not one waiting out a
  database outage.
- ``/readyz`` follows ``is_ready()`` ("the database answers").

The default address is 0.0.0.0: in a pod, Prometheus and the kubelet's probes
reach the sidecar on the pod's address, not on loopback. Nothing served here
changes state or shows a secret (labels are endpoint names only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST

from dispatcher import db
from outbox._shared.text import first_line

log = logging.getLogger("dispatcher.observe.server")

_MAX_HEAD = 8192
_READ_TIMEOUT = 5.0  # seconds for the whole head, however it is dribbled
MAX_CLIENTS = 32
MAX_SCRAPES = MAX_CLIENTS - 4  # /metrics answers at once; four slots stay for the probes
_WRITE_TIMEOUT = 5.0  # seconds for an answer to leave at its reader's pace; then a reset
_OVERDUE = 1.0  # an answer not taken after this many seconds may be dropped for a newcomer
_IDLE = 1.0  # a connection silent this long goes before any other that is not overdue
_BACKLOG = 8  # also how many connections one turn of the loop accepts
# Two scrapes within this many seconds (say, two Prometheus replicas) share a measurement.
_MIN_REFRESH_INTERVAL = 1.0
_PROBE_LINES = (b"GET /healthz", b"GET /readyz", b"HEAD /healthz", b"HEAD /readyz")
_PROBE_PREFIX = max(map(len, _PROBE_LINES))
_NO_LINGER = struct.pack("ii", 1, 0)  # struct linger {on, 0 s}: close() resets
_TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}

class Exposition(Protocol):
    """What the server shows at /metrics: :class:`~dispatcher.observe.metrics.Metrics`,
    or the metrics of many databases (:mod:`dispatcher.observe.by_database`)."""

    def render(self) -> bytes: ...

    def backlog_age(self) -> float | None: ...

    async def refresh_backlog(self, conn: psycopg.AsyncConnection[Any]) -> None: ...


Connector = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]
"""Opens a database connection for one backlog measurement, and closes it after."""


def dsn_connector(dsn: str) -> Connector:
    """A :data:`Connector` that opens a fresh dispatcher connection to ``dsn`` per scrape."""

    @asynccontextmanager
    async def connect() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = await db.connect(dsn, "metrics")
        async with conn:
            yield conn

    return connect


def _reset(transport: asyncio.Transport) -> None:
    """Abort; with an answer still unsent, with a TCP reset (SO_LINGER 0): the kernel
    drops what it holds for this reader as well, instead of offering it for minutes to a
    reader that takes nothing, and the client learns at once that it was closed."""
    if transport.is_closing():
        return  # closed already, or closed after its whole answer was handed over
    sock = transport.get_extra_info("socket")
    if transport.get_write_buffer_size() and sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _NO_LINGER)
    transport.abort()


def _peek(transport: asyncio.Transport) -> bytes:
    """What the kernel holds of a connection's request, left where it is for the stream
    to read (empty when nothing has arrived)."""
    extra = transport.get_extra_info("socket")
    if extra is None:
        return b""
    sock = socket.socket(fileno=extra.fileno())  # a view of the descriptor, not a copy
    try:
        return sock.recv(_MAX_HEAD, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return b""
    finally:
        sock.detach()


def _check(probe: Callable[[], bool], what: str) -> bool:
    """A probe that raises counts as failing; the error is logged, never served."""
    try:
        return bool(probe())
    except Exception:
        log.exception("%s check raised", what)
        return False


class HealthServer:
    """Serves /metrics, /healthz and /readyz until stopped; ``port`` is the bound port."""

    def __init__(self, metrics: Exposition, *, is_alive: Callable[[], bool],
                 is_ready: Callable[[], bool], host: str, port: int,
                 connect: Connector | None = None, scrape_timeout: float = 2.0,
                 write_timeout: float = _WRITE_TIMEOUT) -> None:
        """``host`` and ``port``: where to listen (``DispatcherConfig`` holds the defaults;
        port 0 picks a free one, then ``port`` is the one bound); ``write_timeout``: how
        long a reader may take over one answer (tests shorten it)."""
        self._metrics = metrics
        self._is_alive = is_alive
        self._is_ready = is_ready
        self._connect = connect
        self._host = host
        self._port = port
        self._scrape_timeout = scrape_timeout
        self._write_timeout = write_timeout
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[Any]] = set()
        self._open: dict[_Protocol, asyncio.Transport] = {}  # oldest first
        self._refresh_lock = asyncio.Lock()
        self._refresh_failing = False
        self._rendered: tuple[float, bytes] | None = None  # when (the loop's clock), what
        self._rendering: asyncio.Future[bytes] | None = None  # a render in its thread

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the metrics server is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and start serving; a busy port raises OSError with a clear message."""
        try:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(
                lambda: _Protocol(self, loop), self._host, self._port, backlog=_BACKLOG)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen for metrics on {self._host}:{self._port}: "
                                     f"{exc.strerror or exc}") from exc
        log.info("metrics and health on http://%s:%d/metrics", self._host, self.port)

    async def stop(self) -> None:
        """Stop listening and drop the requests still being answered."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._clients):
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    async def on_scrape(self) -> None:
        """Refresh the backlog gauges within ``scrape_timeout``; failures are logged only."""
        if self._connect is None:
            return
        try:
            await asyncio.wait_for(self._refresh(), self._scrape_timeout)
        except Exception as exc:
            why = first_line(exc)
            if isinstance(exc, TimeoutError):
                why = f"no answer within {self._scrape_timeout:g} s"
            # Once per outage at warning level: a scrape every 15 s must not flood the log.
            log.log(logging.DEBUG if self._refresh_failing else logging.WARNING,
                    "backlog metrics not refreshed: %s", why)
            self._refresh_failing = True
            return
        if self._refresh_failing:
            log.info("backlog metrics refreshed again")
        self._refresh_failing = False

    async def _refresh(self) -> None:
        assert self._connect is not None
        async with self._refresh_lock:
            age = self._metrics.backlog_age()
            if age is not None and age < _MIN_REFRESH_INTERVAL:
                return
            async with self._connect() as conn:
                await self._metrics.refresh_backlog(conn)

    def _admit(self, protocol: _Protocol, transport: asyncio.Transport) -> bool:
        """Whether a connection just accepted is served; at the limit, another makes room
        (see :meth:`_victim`), or none can and it is refused."""
        if len(self._open) >= MAX_CLIENTS:
            victim = self._victim(protocol.speaks(transport) is not False)
            if victim is None:
                return False
            _reset(self._open.pop(victim))  # its task fails; its descriptor is freed
        self._open[protocol] = transport
        return True

    def _victim(self, newcomer_speaks: bool) -> _Protocol | None:
        """Who is closed for a newcomer: an overdue answer (it had its turn), then a
        connection silent for more than _IDLE, then one of the newcomer's kind (silent or
        speaking), then one of the other kind; oldest first in each. None: every one is
        an answer in time or a probe whose request has arrived.

        Like closes like: whether a connection a few milliseconds old is idle or about
        to send its request cannot be told, so a burst of scrapes must not be able to
        close a probe that has not spoken yet, nor a burst of idle connections a scrape
        that has.
        """
        now = asyncio.get_running_loop().time()
        overdue = next((p for p in self._open if p.overdue(now)), None)  # oldest first
        if overdue is not None:
            return overdue
        oldest: dict[bool, _Protocol] = {}  # of each kind (speaking or not)
        for p, transport in self._open.items():  # oldest first
            speaks = p.speaks(transport)  # a peek, for one the loop has not read yet
            if speaks is None or speaks in oldest:
                continue
            if not speaks and now - p.accepted > _IDLE:
                return p
            oldest[speaks] = p
            # Every silent one after the first is younger still, so none is idle: once
            # the newcomer's kind is found too, the rest need no peek.
            if newcomer_speaks in oldest and False in oldest:
                break
        return oldest.get(newcomer_speaks) or oldest.get(not newcomer_speaks)

    def _take_scrape_slot(self, protocol: _Protocol) -> bool:
        """Whether this connection may be answered /metrics; at MAX_SCRAPES the oldest
        overdue scrape makes room, and without one the request is turned away."""
        scrapes = [p for p in self._open if p.scrape]
        if len(scrapes) >= MAX_SCRAPES:
            now = asyncio.get_running_loop().time()
            victim = next((p for p in scrapes if p.overdue(now)), None)
            if victim is None:
                return False
            _reset(self._open.pop(victim))
        protocol.scrape = True
        return True

    async def _render(self, protocol: _Protocol) -> bytes:
        """The metrics as text: rendered anew, except while another scrape's answer is
        still on its way, when one rendered within _MIN_REFRESH_INTERVAL is sent again.

        A render takes about 13 us a series (3.7 s at 5,000 endpoints with the
        histograms by endpoint, 1.5 s with ``--histograms fleet``): it runs in a
        thread, so that deliveries and ``/healthz`` and ``/readyz`` go on meanwhile
        (the loop gets the interpreter at every switch interval), and scrapes that
        come while one renders share it rather than start another. The collectors
        read what the loop replaces whole (a snapshot) or copies in one C call (a
        dict's items), and prometheus_client's own metrics take their locks.
        Slow readers that scrape again as soon as they are dropped would otherwise
        have it render dozens of times a second: a scraper that takes its answer,
        as Prometheus does, always gets a fresh one.
        """
        now = asyncio.get_running_loop().time()
        busy = any(p.scrape and p.writing_since is not None for p in self._open
                   if p is not protocol)
        if busy and self._rendered is not None and \
                now - self._rendered[0] < _MIN_REFRESH_INTERVAL:
            return self._rendered[1]
        if self._rendering is None:
            self._rendering = asyncio.ensure_future(asyncio.to_thread(self._metrics.render))
            self._rendering.add_done_callback(self._rendered_now)
        return await asyncio.shield(self._rendering)

    def _rendered_now(self, done: asyncio.Future[bytes]) -> None:
        """A render ended: the next scrape starts another; a good one is kept for reuse."""
        self._rendering = None
        if not done.cancelled() and done.exception() is None:
            self._rendered = (asyncio.get_running_loop().time(), done.result())

    def _forget(self, protocol: _Protocol) -> None:
        self._open.pop(protocol, None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        protocol = writer.transport.get_protocol()
        assert isinstance(protocol, _Protocol)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    TimeoutError, ConnectionError):
                return  # a client that sends no complete request gets no answer
            protocol.answering = True
            try:
                method, reply = await self._answer(head, protocol)
            except Exception:  # a bug here must not cost the whole server
                log.exception("metrics server failed to answer")
                method, reply = "GET", _Reply(500, b"internal error\n")
            await self._send(protocol, writer, reply.encode(head_only=method == "HEAD"))
        except ConnectionError:
            pass  # closed by the client, or by the server for a newcomer
        finally:
            if task is not None:
                self._clients.discard(task)
            # Nothing is left to send once _send is done: a no-op then. Otherwise (no
            # request, a reader past its deadline, stop()) the connection goes now,
            # whatever its buffers hold.
            assert isinstance(writer.transport, asyncio.Transport)
            _reset(writer.transport)

    async def _send(self, protocol: _Protocol, writer: asyncio.StreamWriter,
                    data: bytes) -> None:
        """Hand the whole answer over within the write timeout, then close.

        With no high-water mark, ``drain()`` returns only once the transport's
        buffer is empty: the answer is all in the kernel's hands, and closing
        waits for nothing. For a reader too slow for that it returns without
        closing, and the caller resets the connection.
        """
        protocol.writing_since = asyncio.get_running_loop().time()
        writer.transport.set_write_buffer_limits(high=0)
        try:
            async with asyncio.timeout(self._write_timeout):
                writer.write(data)
                await writer.drain()
        except TimeoutError:
            log.debug("dropped a metrics client that took no answer in %g s",
                      self._write_timeout)
            return
        self._forget(protocol)  # its slot is free now; its descriptor within this turn
        writer.close()

    async def _answer(self, head: bytes, protocol: _Protocol) -> tuple[str, _Reply]:
        """The method of one request (from its head) and the reply to it."""
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return "GET", _Reply(400, b"bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        return method, await self._route(method, target, protocol)

    async def _route(self, method: str, target: str, protocol: _Protocol) -> _Reply:
        probes = {"/healthz": (self._is_alive, "liveness", b"dispatch loop is not running\n"),
                  "/readyz": (self._is_ready, "readiness", b"database is not reachable\n")}
        if target != "/metrics" and target not in probes:
            return _Reply(404, b"not found\n")
        if method not in ("GET", "HEAD"):
            return _Reply(405, b"method not allowed\n", headers=(("Allow", "GET, HEAD"),))
        if target == "/metrics":
            if not self._take_scrape_slot(protocol):
                return _Reply(503, b"too many scrapes at once\n")
            await self.on_scrape()
            return _Reply(200, await self._render(protocol), CONTENT_TYPE_LATEST)
        probe, what, failing = probes[target]
        return _Reply(200, b"ok\n") if _check(probe, what) else _Reply(503, failing)


class _Protocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, telling the server when a connection is accepted, when
    it first speaks and how far its answer is: the connection limit is applied at once,
    before any task runs."""

    def __init__(self, server: HealthServer, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(asyncio.StreamReader(limit=_MAX_HEAD, loop=loop), server._serve,
                         loop)
        self._health = server
        self.spoke = False
        self.answering = False
        self.scrape = False  # holds one of the MAX_SCRAPES slots
        self.writing_since: float | None = None  # the loop's clock
        self.accepted = loop.time()
        self._start = b""  # the first bytes of its request
        self._complete = False  # its whole head has arrived

    def overdue(self, now: float) -> bool:
        """Whether its answer has waited more than _OVERDUE for its reader."""
        return self.writing_since is not None and now - self.writing_since > _OVERDUE

    def speaks(self, transport: asyncio.Transport) -> bool | None:
        """Whether any of its request has arrived, as read so far or else still in the
        kernel's buffer (peeked, not taken); None when it is not to be closed for a
        newcomer: it is being answered, or its whole request asks for a probe."""
        if self.answering:
            return None
        head, complete = self._start, self._complete
        if not self.spoke:
            head = _peek(transport)
            complete = b"\r\n\r\n" in head
        if complete and head.startswith(_PROBE_LINES):
            return None  # answered within a turn or two, a few hundred bytes
        return bool(head)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self._health._admit(self, transport):
            _reset(transport)
            return
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.spoke = True
        if not self._complete:  # what speaks needs: how it starts, whether it ended
            seen = self._start[-3:] + data
            self._complete = b"\r\n\r\n" in seen
            if len(self._start) < _PROBE_PREFIX:
                self._start = (self._start + data)[:_PROBE_PREFIX]
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._health._forget(self)
        super().connection_lost(exc)


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    body: bytes
    ctype: str = _TEXT
    headers: tuple[tuple[str, str], ...] = ()

    def encode(self, *, head_only: bool) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Unknown')}",
                 f"Content-Type: {self.ctype}", f"Content-Length: {len(self.body)}",
                 "Cache-Control: no-store", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body
