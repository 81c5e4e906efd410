"""A connection flood on the metrics port, against the real dispatcher under ``ulimit -n 256``.

Once, 1,179 idle connections to the metrics port took every descriptor of a
dispatcher under ``ulimit -n 1024``: ``/healthz`` stopped answering, every
delivery to a healthy endpoint failed as a ``connect`` failure of that
endpoint (its circuit opened), and asyncio logged each failed accept. Here a
client keeps 600 connections open to the metrics port for the whole test,
opening new ones as the server closes old ones, while events are published
to a healthy endpoint on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
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
def flooding(port: int, seconds: float = 60.0) -> Iterator[list[int]]:
    """FLOOD idle connections to 127.0.0.1:``port``, kept up in a thread until the block
    ends (or ``seconds``); yields [connections opened]."""
    stop = threading.Event()
    opened = [0]

    def run() -> None:
        held: dict[int, socket.socket] = {}
        poll = select.poll()
        deadline = time.monotonic() + seconds
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                while len(held) < FLOOD:
                    sock = socket.socket()
                    sock.setblocking(False)
                    sock.connect_ex(("127.0.0.1", port))
                    held[sock.fileno()] = sock
                    poll.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
                    opened[0] += 1
                for fd, _ in poll.poll(20):  # closed by the server: open another
                    poll.unregister(fd)
                    held.pop(fd).close()
        finally:
            for sock in held.values():
                sock.close()
    thread = threading.Thread(target=run, daemon=True, name="flood")
    thread.start()
    try:
        time.sleep(1.0)  # the flood established
        yield opened
    finally:
        stop.set()
        thread.join(10)


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
