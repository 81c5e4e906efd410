"""The metrics and health server: ``GET /metrics``, ``/healthz`` and ``/readyz``.

A few dozen lines of HTTP/1.1 on asyncio's streams, in the
dispatcher's own event loop, so that it needs no dependency and no thread.
Each connection serves one request and is closed (``Connection: close``):
Prometheus and the kubelet ask every few seconds, so keep-alive would buy
nothing. Requests are small and bounded (8 KiB of head, 5 s to send it).

Connections are bounded too: at most ``MAX_CLIENTS`` at once, decided as
each is accepted. A client that connects beyond them closes the oldest
connection that has sent nothing yet (else the oldest still sending its
head; it is itself closed when every one is being answered), so a flood of
idle connections holds a few dozen descriptors, not all of the process's:
it once took every descriptor and with them every delivery. A scraper that
sends its request as it connects, as Prometheus and the kubelet do, has
spoken before many newer idle connections can push it out, and is answered
during such a flood. The listen backlog is small for the same reason: few
connections are accepted per turn of the loop.

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
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST

from dispatcher import db
from dispatcher.observe.metrics import Metrics
from outbox._shared.text import first_line

log = logging.getLogger("dispatcher.observe.server")

_MAX_HEAD = 8192
_READ_TIMEOUT = 5.0  # seconds for the whole head, however it is dribbled
MAX_CLIENTS = 32
_BACKLOG = 8  # also how many connections one turn of the loop accepts
# Two scrapes within this many seconds (say, two Prometheus replicas) share a measurement.
_MIN_REFRESH_INTERVAL = 1.0
_TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}

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


def _check(probe: Callable[[], bool], what: str) -> bool:
    """A probe that raises counts as failing; the error is logged, never served."""
    try:
        return bool(probe())
    except Exception:
        log.exception("%s check raised", what)
        return False


class HealthServer:
    """Serves /metrics, /healthz and /readyz until stopped; ``port`` is the bound port."""

    def __init__(self, metrics: Metrics, *, is_alive: Callable[[], bool],
                 is_ready: Callable[[], bool], host: str, port: int,
                 connect: Connector | None = None, scrape_timeout: float = 2.0) -> None:
        """``host`` and ``port``: where to listen (``DispatcherConfig`` holds the defaults;
        port 0 picks a free one, then ``port`` is the one bound)."""
        self._metrics = metrics
        self._is_alive = is_alive
        self._is_ready = is_ready
        self._connect = connect
        self._host = host
        self._port = port
        self._scrape_timeout = scrape_timeout
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[Any]] = set()
        self._open: dict[_Protocol, asyncio.Transport] = {}  # oldest first
        self._refresh_lock = asyncio.Lock()
        self._refresh_failing = False

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
        """Whether a connection just accepted is served; at the limit, another makes room.

        The oldest connection that has sent nothing goes first, then the oldest
        still sending its head; one being answered is never closed for another.
        """
        if len(self._open) >= MAX_CLIENTS:
            waiting = [p for p in self._open if not p.answering]
            victim = next((p for p in waiting if not p.spoke), waiting[0] if waiting else None)
            if victim is None:
                return False
            self._open.pop(victim).abort()  # its reader fails; its descriptor is freed
        self._open[protocol] = transport
        return True

    def _forget(self, protocol: _Protocol) -> None:
        self._open.pop(protocol, None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    TimeoutError, ConnectionError):
                return  # a client that sends no complete request gets no answer
            protocol = writer.transport.get_protocol()
            if isinstance(protocol, _Protocol):
                protocol.answering = True  # no longer one to close for a newcomer
            try:
                method, reply = await self._answer(head)
            except Exception:  # a bug here must not cost the whole server
                log.exception("metrics server failed to answer")
                method, reply = "GET", _Reply(500, b"internal error\n")
            writer.write(reply.encode(head_only=method == "HEAD"))
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            if task is not None:
                self._clients.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, head: bytes) -> tuple[str, _Reply]:
        """The method of one request (from its head) and the reply to it."""
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return "GET", _Reply(400, b"bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        return method, await self._route(method, target)

    async def _route(self, method: str, target: str) -> _Reply:
        probes = {"/healthz": (self._is_alive, "liveness", b"dispatch loop is not running\n"),
                  "/readyz": (self._is_ready, "readiness", b"database is not reachable\n")}
        if target != "/metrics" and target not in probes:
            return _Reply(404, b"not found\n")
        if method not in ("GET", "HEAD"):
            return _Reply(405, b"method not allowed\n", headers=(("Allow", "GET, HEAD"),))
        if target == "/metrics":
            await self.on_scrape()
            return _Reply(200, self._metrics.render(), CONTENT_TYPE_LATEST)
        probe, what, failing = probes[target]
        return _Reply(200, b"ok\n") if _check(probe, what) else _Reply(503, failing)


class _Protocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, telling the server when a connection is accepted and when
    it first speaks: the connection limit is applied at once, before any task runs."""

    def __init__(self, server: HealthServer, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(asyncio.StreamReader(limit=_MAX_HEAD, loop=loop), server._serve,
                         loop)
        self._health = server
        self.spoke = False
        self.answering = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self._health._admit(self, transport):
            transport.abort()
            return
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.spoke = True
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
