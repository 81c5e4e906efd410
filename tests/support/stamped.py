"""A receiver that times each request by the kernel's clock, not by when it was read.

``outbox.testing.Receiver`` notes ``time.time()`` once its thread has read a
request: on a busy machine that thread may wait for a core, and requests read
late look closer together than they arrived (up to 150 ms late was seen with
two busy loops beside the suite). A test that counts requests per second
needs their arrival: this one asks Linux for the moment each request's first
bytes reached the socket (``SO_TIMESTAMPNS``, a receive timestamp per read),
so a late read does not move it. Plain HTTP/1.1 on 127.0.0.1, keep-alive,
``Content-Length`` bodies; every request is answered 204.
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
from dataclasses import dataclass, field
from types import TracebackType

SO_TIMESTAMPNS = 35  # Linux; Python's socket module does not name it
_ANSWER = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"


@dataclass(slots=True)
class _Connection:
    buffer: bytearray = field(default_factory=bytearray)
    first_bytes_at: float = 0.0  # the kernel's time of the current request's first bytes


class StampedReceiver:
    """``with StampedReceiver() as rx: ... rx.url ... rx.arrivals()``: (arrival, webhook-id)."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._server.setblocking(False)
        self.port = self._server.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._arrivals: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="stamped-rx")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def arrivals(self) -> list[tuple[float, str]]:
        """(the kernel's arrival time, webhook-id) of every request so far, in arrival order."""
        with self._lock:
            return sorted(self._arrivals)

    def __enter__(self) -> StampedReceiver:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.fileobj, key.data)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            conn, _ = self._server.accept()
        except BlockingIOError:
            return
        conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        conn.setblocking(False)
        self._selector.register(conn, selectors.EVENT_READ, _Connection())

    def _read(self, conn: socket.socket, state: _Connection) -> None:
        try:
            data, ancillary, _, _ = conn.recvmsg(65536, 1024)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        if not data:
            self._selector.unregister(conn)
            conn.close()
            return
        if not state.buffer:  # a new request begins with these bytes
            state.first_bytes_at = next(
                (sec + nsec / 1e9 for level, kind, raw in ancillary
                 if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS
                 for sec, nsec in [struct.unpack("qq", raw[:16])]), 0.0)
        state.buffer += data
        while (end := state.buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(state.buffer[:end]).decode("latin-1").split("\r\n")
            headers = {name.strip().lower(): value.strip()
                       for name, _, value in (line.partition(":") for line in head[1:])}
            total = end + 4 + int(headers.get("content-length", "0"))
            if len(state.buffer) < total:
                return
            del state.buffer[:total]
            with self._lock:
                self._arrivals.append((state.first_bytes_at, headers.get("webhook-id", "")))
            conn.sendall(_ANSWER)
            # Bytes already here belong to a request that arrived with these ones.
