"""Behind the servers users put in front of endpoints: nginx, and one that hangs up after answering.

Real dispatchers (``python -m dispatcher``) deliver through Debian's nginx
(started by the test on 127.0.0.1 with its own configuration, see
``tests.support.nginx``; skipped where it is not installed, ``.ci/run``
installs it) to a real receiver: a short keep-alive that nginx ends while a
request may be on its way, its default 1 MiB body limit against a batch,
and TLS with a private CA. Then a raw server that says ``keep-alive`` and
closes the connection right after answering. Events are published in
bursts with pauses, or in waves with a pause about as long as nginx's
keep-alive timeout, so that idle connections are reused after every length
of idleness, some just as nginx closes them. What must hold: no failed
attempt (the attempt history and the metrics), nothing lost, and few
requests sent twice (``outbox_requests_resent_total``).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import outbox
from outbox.testing import Receiver
from outbox.testing._receiver import Request
from tests.support.dispatcher import run_once, wait_until
from tests.support.egress import Pki
from tests.support.loop_server import LoopServer
from tests.support.nginx import Nginx, find_nginx
from tests.support.resilience import (
    DispatcherProcess,
    Fleet,
    add_endpoint,
    all_delivered,
    received_ids,
    states,
    summary,
)

needs_nginx = pytest.mark.skipif(find_nginx() is None, reason="nginx is not installed "
                                 "(Debian: apt-get install nginx-light)")


def publish(dsn: str, count: int, payload_bytes: int = 0) -> list[str]:
    """``count`` events in one transaction, each payload (as JSON) ``payload_bytes`` long if
    that is given."""
    def payload(n: int) -> dict[str, object]:
        if not payload_bytes:
            return {"n": n}
        return {"n": n, "p": "x" * (payload_bytes - len(f'{{"n":{n},"p":""}}'))}
    events = [outbox.Event("wire.test", payload(n)) for n in range(count)]
    with psycopg.connect(dsn) as conn, conn.transaction():
        return [str(i) for i in outbox.publish_many(conn, events)]


def in_waves(dsn: str, waves: int, size: int, pause: tuple[float, float]) -> list[str]:
    """Publish ``waves`` times ``size`` events, each wave once the last is delivered and
    connections have idled for a pause drawn from ``pause`` (seconds)."""
    ids: list[str] = []
    for _ in range(waves):
        ids += publish(dsn, size)
        total = len(ids)
        wait_until(lambda total=total: all_delivered(dsn, total), 120, f"{total} deliveries")
        time.sleep(random.uniform(*pause))
    return ids


def in_bursts(dsn: str, total: int, largest: int, pause: float) -> list[str]:
    """Publish ``total`` events in bursts of 1 to ``largest`` with pauses of up to ``pause``
    seconds: requests at once come and go, so that connections idle for every length of
    time, some just as long as the server keeps them."""
    ids: list[str] = []
    while len(ids) < total:
        ids += publish(dsn, min(random.randint(1, largest), total - len(ids)))
        time.sleep(random.uniform(0, pause))
    wait_until(lambda: all_delivered(dsn, total), 120, f"{total} deliveries")
    return ids


def failed_attempts(dsn: str) -> list[tuple[object, ...]]:
    """The attempt history: one row per failed attempt."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT status, reason, error FROM outbox.attempts").fetchall()


def counted(processes: list[DispatcherProcess], metric: str) -> float:
    return sum(process.metric(metric) for process in processes)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@needs_nginx
@pytest.mark.parametrize("dispatchers", [1, 3])
def test_short_keep_alive_behind_nginx_fails_no_attempt(dsn: str, receiver: Receiver,
                                                        fleet: Fleet, dispatchers: int) -> None:
    """nginx ending idle connections after 2 s and every 5th request: 2,000 events, 0 failed
    attempts, none lost."""
    with Nginx(receiver.port, keepalive_timeout="2s", keepalive_requests=5) as proxy:
        add_endpoint(dsn, proxy.url, max_in_flight=8)
        processes = [fleet.start() for _ in range(dispatchers)]
        ids = in_bursts(dsn, 2000, 30, 0.4)
        failures = counted(processes, "outbox_delivery_failures_total")
        resent = counted(processes, "outbox_requests_resent_total")
    summary("nginx keep-alive", dispatchers=dispatchers, events=len(ids), resent=resent)
    assert failed_attempts(dsn) == []
    assert failures == 0
    assert set(received_ids(receiver)) == set(ids)


@needs_nginx
def test_batch_over_nginx_body_limit_is_split_and_delivered(dsn: str, receiver: Receiver,
                                                            fleet: Fleet) -> None:
    """--max-batch 50, 200 events of 30 KiB behind nginx's default 1 MiB limit: each batch
    refused with 413 goes again in halves, every event delivered on its first attempt."""
    with Nginx(receiver.port) as proxy:
        add_endpoint(dsn, proxy.url, max_batch=50, max_in_flight=4)
        ids = publish(dsn, 200, payload_bytes=30 * 1024)
        process = fleet.start()
        wait_until(lambda: all_delivered(dsn, 200), 120, "200 deliveries")
        failures = process.metric("outbox_delivery_failures_total")
    assert failures == 0
    assert failed_attempts(dsn) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        attempts = conn.execute("SELECT attempts, count(*) FROM outbox.deliveries "
                                "GROUP BY attempts").fetchall()
    assert attempts == [(1, 200)]  # the refused requests were no attempt of theirs
    requests = receiver.snapshot()
    assert all(len(r.body) <= 1 << 20 for r in requests)
    got = [item["id"] for r in requests for item in json.loads(r.body)]
    assert set(got) == set(ids)
    assert "refused a batch of 50 events as too large (413)" in process.log()


@needs_nginx
def test_one_event_over_nginx_body_limit_is_dead_with_the_page_as_text(
        dsn: str, receiver: Receiver) -> None:
    """A 1 MiB payload, wrapped, is over nginx's default limit: a single event's 413 is
    permanent, and last_error reads the error page as one line of text."""
    with Nginx(receiver.port) as proxy:
        add_endpoint(dsn, proxy.url, max_batch=50)
        [event_id] = publish(dsn, 1, payload_bytes=1 << 20)
        code, log = run_once(dsn)
    assert code == 1, log
    assert states(dsn) == Counter({"dead": 1})
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT attempts, last_status, last_error FROM outbox.deliveries "
                           "WHERE event_id = %s", (event_id,)).fetchone()
    assert row is not None
    attempts, status, error = row
    assert (attempts, status) == (1, 413)
    assert re.fullmatch(r"HTTP 413 Request Entity Too Large: 413 Request Entity Too Large "
                        r"nginx(/[\d.]+)?", error), error
    assert receiver.count == 0


@needs_nginx
def test_tls_behind_nginx_with_a_private_ca(dsn: str, receiver: Receiver, fleet: Fleet,
                                           pki: Pki) -> None:
    """HTTPS through nginx, its certificate from a private CA (the endpoint's --ca-file), a
    2 s keep-alive: every event delivered, no attempt failed."""
    chain = Path(pki.write("server.pem", b"".join(
        p.bytes() for p in pki.server_cert.cert_chain_pems)))
    key = Path(pki.write("server.key", pki.server_cert.private_key_pem.bytes()))
    with Nginx(receiver.port, keepalive_timeout="2s", keepalive_requests=5,
               certificate=(chain, key)) as proxy:
        add_endpoint(dsn, proxy.url, ca_file=pki.ca_file)
        process = fleet.start()
        ids = in_waves(dsn, 3, 200, (1.85, 2.15))
        failures = process.metric("outbox_delivery_failures_total")
    assert proxy.url.startswith("https://")
    assert failures == 0
    assert failed_attempts(dsn) == []
    assert set(received_ids(receiver)) == set(ids)


class HangsUpAfterAnswering(LoopServer):
    """Answers 200 with ``connection: keep-alive``, then closes the connection at once: after
    every answer, or after a random 1 to 4 of them."""

    def __init__(self, every: bool) -> None:
        super().__init__("hangs-up")
        self.every = every
        self.requests: Counter[str] = Counter()  # per webhook-id, read whole

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        left = 1 if self.every else random.randint(1, 4)
        try:
            while left:
                request = await Request.read(reader)
                self.requests[request.header("webhook-id") or ""] += 1
                writer.write(b"HTTP/1.1 200 OK\r\nconnection: keep-alive\r\n"
                             b"content-length: 0\r\n\r\n")
                left -= 1
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()


@pytest.fixture(params=[True, False], ids=["after-every-answer", "after-a-few"])
def hangs_up(request: pytest.FixtureRequest) -> Iterator[HangsUpAfterAnswering]:
    with HangsUpAfterAnswering(every=request.param) as server:
        yield server


def test_server_hanging_up_after_answering_loses_nothing(
        dsn: str, fleet: Fleet, hangs_up: HangsUpAfterAnswering) -> None:
    """A server that says keep-alive and closes after answering: 2,000 events delivered, no
    attempt failed, at most 0.1 % of requests sent twice."""
    add_endpoint(dsn, hangs_up.url, max_in_flight=8)
    process = fleet.start()
    ids = in_waves(dsn, 4, 500, (0.0, 0.3))
    resent = process.metric("outbox_requests_resent_total")
    failures = process.metric("outbox_delivery_failures_total")
    summary("hangs up after answering", every=hangs_up.every, events=len(ids), resent=resent,
            requests=sum(hangs_up.requests.values()))
    assert failures == 0
    assert failed_attempts(dsn) == []
    assert set(hangs_up.requests) == set(ids)
    assert resent <= len(ids) * 0.001
