"""Floods of the metrics port, against the real dispatcher under ``ulimit -n 256``.

Once, 1,179 idle connections to the metrics port took every descriptor of a
dispatcher under ``ulimit -n 1024``: ``/healthz`` stopped answering, every
delivery to a healthy endpoint failed as a ``connect`` failure of that
endpoint (its circuit opened), and asyncio logged each failed accept. Here a
client keeps 600 connections open to the metrics port for the whole test,
opening new ones as the server closes old ones, while events are published
to a healthy endpoint on 127.0.0.1.

Later, 32 clients that sent ``GET /metrics`` and never read held every
connection of the metrics server for good, and ``/healthz`` went
unanswered. Here more than that many such clients, reconnecting as soon as
they are closed, ask for a /metrics larger than their buffers and the
kernel's, while /healthz is probed as the kubelet does.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg

from dispatcher.observe.server import MAX_CLIENTS
from outbox.testing import Receiver
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, wait_for_state

FLOOD = 600
LIMIT = 256  # the dispatcher's open files, soft and hard


@contextlib.contextmanager
def kept_open(count: int, dial: Callable[[], socket.socket | None], gone: int,
              name: str, seconds: float = 60.0) -> Iterator[list[int]]:
    """``count`` connections made by ``dial`` (None: the server turned it away for now),
    each made again as soon as ``poll`` reports ``gone`` for it, in a thread until the
    block ends (or ``seconds``); yields [connections opened]."""
    stop = threading.Event()
    opened = [0]

    def run() -> None:
        held: dict[int, socket.socket] = {}
        poll = select.poll()
        deadline = time.monotonic() + seconds
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                while len(held) < count and (sock := dial()) is not None:
                    held[sock.fileno()] = sock
                    poll.register(sock, gone)
                    opened[0] += 1
                for fd, _ in poll.poll(20):  # closed or reset by the server: open another
                    poll.unregister(fd)
                    held.pop(fd).close()
        finally:
            for sock in held.values():
                sock.close()
    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    try:
        time.sleep(1.0)  # every slot the server gives them is taken
        yield opened
    finally:
        stop.set()
        thread.join(10)


def flooding(port: int) -> contextlib.AbstractContextManager[list[int]]:
    """FLOOD idle connections to 127.0.0.1:``port``, kept up until the block ends;
    yields [connections opened]."""
    def dial() -> socket.socket:
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        return sock
    return kept_open(FLOOD, dial, select.POLLIN | select.POLLHUP | select.POLLERR, "flood")


def answer(client: httpx.Client, url: str, tries: int = 5) -> httpx.Response:
    """GET ``url``, as a probe with a failure threshold would: a few tries, 0.2 s apart."""
    for _ in range(tries - 1):
        with contextlib.suppress(httpx.TransportError):
            return client.get(url)
        time.sleep(0.2)
    return client.get(url)


def test_metrics_flood_costs_no_delivery_and_healthz_answers(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """Under a flood of idle metrics connections: every delivery to a healthy endpoint
    succeeds, nothing is charged to it, /healthz answers, the process's descriptors stay
    far below its limit, and no accept error floods the log."""
    with Receiver() as receiver, Dispatcher(dsn, open_files=LIMIT) as dispatcher:
        add_endpoint(conn, "healthy", receiver.url)
        dispatcher.wait_serving()
        assert dispatcher.process is not None
        pid = dispatcher.process.pid
        limits = Path(f"/proc/{pid}/limits").read_text()
        assert re.search(rf"Max open files\s+{LIMIT}\s+{LIMIT}", limits), limits
        with flooding(dispatcher.port) as opened:
            events = [publish(conn, "order.created", {"n": n}) for n in range(20)]
            peak = 0
            for event_id in events:
                peak = max(peak, len(os.listdir(f"/proc/{pid}/fd")))
                wait_for_state(conn, event_id, "delivered", dispatcher=dispatcher)
            with httpx.Client(trust_env=False, timeout=5) as client:
                health = answer(client, dispatcher.base_url + "/healthz")
                metrics = answer(client, dispatcher.base_url + "/metrics").text
            peak = max(peak, len(os.listdir(f"/proc/{pid}/fd")))
        log = dispatcher.log()
    assert opened[0] > FLOOD  # the server closed idle connections and the flood reopened
    assert health.status_code == 200
    assert len(receiver.snapshot()) >= 20
    for reason in ("connect", "other", "timeout"):
        assert f'outbox_delivery_failures_total{{endpoint="healthy",reason="{reason}"}} 0.0' \
            in metrics
    assert 'outbox_circuit_open{endpoint="healthy"} 1.0' not in metrics
    assert peak < MAX_CLIENTS + 64, peak  # connections held, PostgreSQL's, the endpoint's
    assert log.count("out of system resource") <= 1
    assert "Too many open files" not in log


SLOW_READERS = 40  # more than MAX_CLIENTS
ENDPOINTS = 48  # /metrics is then about 150 KB: more than a reader's and the kernel's buffers
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def slow_readers(port: int) -> contextlib.AbstractContextManager[list[int]]:
    """SLOW_READERS connections to 127.0.0.1:``port`` that send ``GET /metrics`` and never
    read (a receive buffer of a few KiB, set before connecting), each reopened as soon as
    the server closes it, until the block ends; yields [connections opened]."""
    def dial() -> socket.socket | None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        # Ethernet's segment size: with loopback's 64 KiB segments the server's
        # kernel would size its send buffer to take megabytes of the answer.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(REQUEST)
        except OSError:
            sock.close()
            return None
        return sock
    # Not POLLIN: nothing is read.
    return kept_open(SLOW_READERS, dial, select.POLLRDHUP | select.POLLHUP | select.POLLERR,
                     "slow-readers")


def probe(url: str) -> float | str:
    """One liveness probe as the kubelet sends it (one try, 2 s): its latency, or why it
    got no 200."""
    started = time.monotonic()
    try:
        with httpx.Client(trust_env=False, timeout=2) as client:
            status = client.get(url).status_code
    except httpx.TransportError as exc:
        return f"{exc!r} after {time.monotonic() - started:.3f} s"
    return time.monotonic() - started if status == 200 else f"status {status}"


def test_healthz_answers_while_slow_readers_hold_the_metrics_port(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """With more than MAX_CLIENTS clients that ask for a /metrics too large for their
    buffers and never read, reconnecting whenever closed, /healthz still answers within
    2 s every time for longer than the answer deadline, and descriptors stay bounded."""
    with Receiver() as receiver, Dispatcher(dsn, open_files=LIMIT) as dispatcher:
        for n in range(ENDPOINTS):
            add_endpoint(conn, f"endpoint-{n:02d}", receiver.url)
        dispatcher.wait_serving()
        assert dispatcher.process is not None
        pid = dispatcher.process.pid
        assert len(dispatcher.get("/metrics").content) > 140_000
        latencies: list[float | str] = []
        peak = 0
        with slow_readers(dispatcher.port) as opened:
            until = time.monotonic() + 6.0  # longer than the 5 s answer deadline
            while time.monotonic() < until:
                latencies.append(probe(dispatcher.base_url + "/healthz"))
                peak = max(peak, len(os.listdir(f"/proc/{pid}/fd")))
                time.sleep(0.5)
    assert all(isinstance(t, float) for t in latencies), latencies
    assert max(t for t in latencies if isinstance(t, float)) < 2.0
    assert opened[0] > SLOW_READERS  # the server gave up on stuck answers and they came back
    assert peak < MAX_CLIENTS + 64, peak
