"""A TCP fault proxy on 127.0.0.1: put it between the dispatcher and PostgreSQL or a receiver.

It forwards bytes both ways, on its own asyncio loop in a background thread,
until told to misbehave:

- ``latency``: seconds added before every chunk it forwards;
- ``blackhole(match)``: the links ``match`` selects (all of them, and new
  ones, when None) stop forwarding anything, both ways, and stay open: a
  half-open connection, as after a silent network partition, which neither
  end notices until it waits for an answer;
- ``reset(match)``: the links are closed with a TCP reset (RST) at once;
- ``close_after``: each new link is closed after that many bytes from the
  target (a connection cut in the middle of an answer);
- ``stall_after``: each new link is blackholed once that many bytes came
  from the target (a connection cut silently after its first exchanges);
- ``refuse``: new connections are reset as soon as they arrive (the target
  is "down");
- ``heal()``: new links are forwarded normally again (links already
  blackholed stay dead, as real ones would).

Every link knows ``upstream_port``, the local port of its connection to the
target: PostgreSQL shows it as ``client_port`` in ``pg_stat_activity``, so a
test can pick the link of one named dispatcher connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg

from tests.support.loop_server import LoopServer

T = TypeVar("T")
_CHUNK = 65536


@dataclass(eq=False)
class Link:
    """One client connection and its connection to the target."""

    upstream_port: int
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    stalled: asyncio.Event = field(default_factory=asyncio.Event)  # set: blackholed
    from_target: int = 0  # bytes forwarded from the target to the client

    def reset(self) -> None:
        """Close both ends with RST instead of FIN."""
        for writer in (self.client, self.upstream):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


Match = Callable[[Link], bool]


class FaultProxy(LoopServer):
    """``with FaultProxy(port) as proxy:``; connect to ``proxy.port`` instead of ``port``."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        super().__init__("fault-proxy")
        self.target = (target_host, target_port)
        self.latency = 0.0
        self.close_after: int | None = None
        self.stall_after: int | None = None
        self.refuse = False
        self._blackhole_new = False
        self.links: list[Link] = []
        self.accepted = 0

    # -- controls, called from the test's thread -------------------------------------

    def blackhole(self, match: Match | None = None) -> int:
        """Stop forwarding on the links ``match`` selects (None: all, and new ones); how many."""
        def apply() -> int:
            if match is None:
                self._blackhole_new = True
            chosen = [link for link in self.links if match is None or match(link)]
            for link in chosen:
                link.stalled.set()
            return len(chosen)
        return self._call(apply)

    def reset(self, match: Match | None = None) -> int:
        """Reset the links ``match`` selects (None: all); how many."""
        def apply() -> int:
            chosen = [link for link in self.links if match is None or match(link)]
            for link in chosen:
                link.reset()
            return len(chosen)
        return self._call(apply)

    def heal(self) -> None:
        """Forward new links normally again: no blackhole, no refusal, no cut, no latency."""
        def apply() -> None:
            self._blackhole_new = False
            self.refuse = False
            self.close_after = None
            self.stall_after = None
            self.latency = 0.0
        self._call(apply)

    def dsn(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the proxy's."""
        return psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def url(self, path: str = "/") -> str:
        """An http URL that reaches the target through the proxy."""
        return f"http://127.0.0.1:{self.port}{path}"

    # -- the loop ------------------------------------------------------------------------

    def _call(self, function: Callable[[], T]) -> T:
        async def run() -> T:
            return function()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        try:
            if self.refuse:
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.transport.abort()
                return
            link = Link(up_writer.get_extra_info("sockname")[1], writer, up_writer)
            if self._blackhole_new:
                link.stalled.set()
            self.links.append(link)
            await asyncio.gather(self._pump(reader, up_writer, link, False),
                                 self._pump(up_reader, writer, link, True),
                                 return_exceptions=True)
        finally:
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    link: Link, from_target: bool) -> None:
        limit = self.close_after if from_target else None
        stall = self.stall_after if from_target else None
        try:
            while True:
                data = await reader.read(_CHUNK)
                if stall is not None and link.from_target >= stall:
                    link.stalled.set()
                if link.stalled.is_set():
                    await asyncio.Event().wait()  # swallowed, and never anything again
                if not data:
                    break
                if self.latency:
                    await asyncio.sleep(self.latency)
                if limit is not None and link.from_target + len(data) >= limit:
                    writer.write(data[:limit - link.from_target])
                    await writer.drain()
                    link.reset()
                    return
                if from_target:
                    link.from_target += len(data)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            link.reset()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def _closing(self) -> None:
        for link in self.links:
            link.reset()
