"""The metrics and health server against a real PostgreSQL and real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import psycopg
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

import outbox
from dispatcher.observe.metrics import BacklogRow, Metrics
from dispatcher.observe.server import (
    MAX_CLIENTS,
    MAX_SCRAPES,
    Connector,
    HealthServer,
    dsn_connector,
)
from outbox.sql import queries

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def closed_port_dsn() -> str:
    """A DSN pointing at a port nobody listens on: the database is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://outbox@127.0.0.1:{port}/outbox?connect_timeout=2"


def add_endpoint(conn: psycopg.Connection[Any], name: str, like: str = "%") -> int:
    row = conn.execute(
        "INSERT INTO outbox.endpoints (name, url, events, events_like)"
        " VALUES (%s, 'http://127.0.0.1:9/', ARRAY[%s], ARRAY[%s]) RETURNING id",
        (name, like.replace("%", "*"), like)).fetchone()
    assert row is not None
    return int(row[0])


def gauge(text: str, name: str, endpoint: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"endpoint": endpoint}:
                return float(sample.value)
    return None


@asynccontextmanager
async def serving(metrics: Metrics | None = None, *, alive: Callable[[], bool] = lambda: True,
                  ready: Callable[[], bool] = lambda: True, connect: Connector | None = None,
                  scrape_timeout: float = 2.0) -> AsyncIterator[httpx.AsyncClient]:
    """A started HealthServer on 127.0.0.1 (port 0) and an httpx client aimed at it."""
    server = HealthServer(metrics or Metrics(), is_alive=alive, is_ready=ready,
                          connect=connect, host="127.0.0.1", port=0,
                          scrape_timeout=scrape_timeout)
    async with server, httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}",
                                         trust_env=False, timeout=10) as client:
        yield client


def test_backlog_query_counts_pending_per_live_endpoint(dsn: str,
                                                        conn: psycopg.Connection[Any]) -> None:
    """refresh_backlog reports each live endpoint's pending count and oldest age; 0 when idle."""
    busy = add_endpoint(conn, "busy", "mail.%")
    add_endpoint(conn, "idle", "order.%")
    gone = add_endpoint(conn, "gone")
    for i in range(3):
        outbox.publish(conn, "mail.received", {"n": i})
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE id = %s", (gone,))
    # One of busy's deliveries is done (not pending), another has waited an hour.
    conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now()"
                 " WHERE id = (SELECT min(id) FROM outbox.deliveries WHERE endpoint_id = %s)",
                 (busy,))
    conn.execute("UPDATE outbox.deliveries SET created_at = clock_timestamp() - interval '1 hour'"
                 " WHERE id = (SELECT max(id) FROM outbox.deliveries WHERE endpoint_id = %s)",
                 (busy,))
    conn.commit()

    async def measure() -> tuple[BacklogRow, ...]:
        metrics = Metrics()
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            await metrics.refresh_backlog(aconn)
            assert aconn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        return metrics.backlog()

    rows = {row.endpoint: row for row in run(measure())}
    assert set(rows) == {"busy", "idle"}
    assert rows["busy"].pending == 2
    assert 3600 <= rows["busy"].oldest_seconds < 3600 + 300
    assert rows["idle"] == BacklogRow("idle", 0, 0.0)


def test_backlog_query_can_use_the_pending_index(conn: psycopg.Connection[Any]) -> None:
    """The backlog query's filter matches a partial index of pending rows (deliveries_pending,
    or deliveries_turns, ordered by tenant for the per-tenant gauges), never the history."""
    add_endpoint(conn, "a")
    conn.execute("SET enable_seqscan = off")
    plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + queries["backlog"]))
    assert "deliveries_pending" in plan or "deliveries_turns" in plan, plan


def test_scrape_shows_every_metric_and_the_live_backlog(dsn: str,
                                                        conn: psycopg.Connection[Any]) -> None:
    """GET /metrics refreshes the backlog from the database and serves every documented metric."""
    add_endpoint(conn, "workflow")
    outbox.publish(conn, "mail.received", {"n": 1})
    outbox.publish(conn, "mail.received", {"n": 2})
    conn.commit()
    metrics = Metrics()
    metrics.known_endpoints(["workflow"])
    metrics.attempt("workflow", 0.02)
    metrics.delivered("workflow", 0.5)

    async def scrape() -> httpx.Response:
        async with serving(metrics, connect=dsn_connector(dsn)) as client:
            return await client.get("/metrics")

    response = run(scrape())
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    text = response.text
    assert gauge(text, "outbox_pending", "workflow") == 2
    oldest = gauge(text, "outbox_oldest_pending_seconds", "workflow")
    assert oldest is not None
    assert oldest >= 0
    assert gauge(text, "outbox_delivered_total", "workflow") == 1
    for name, kind in [("outbox_delivered_total", "counter"),
                       ("outbox_delivery_failures_total", "counter"),
                       ("outbox_dead_letters_total", "counter"),
                       ("outbox_pending", "gauge"),
                       ("outbox_oldest_pending_seconds", "gauge"),
                       ("outbox_delivery_duration_seconds", "histogram"),
                       ("outbox_delivery_lag_seconds", "histogram")]:
        assert f"# TYPE {name} {kind}\n" in text, name
    assert 'outbox_delivery_failures_total{endpoint="workflow",reason="http_4xx"} 0.0' in text


def test_scrape_says_which_endpoints_are_disabled(dsn: str,
                                                 conn: psycopg.Connection[Any]) -> None:
    """outbox_endpoint_enabled is 1 for an enabled endpoint, 0 once disabled (operator or 410)."""
    add_endpoint(conn, "live")
    by_hand = add_endpoint(conn, "paused")
    gone = add_endpoint(conn, "gone")
    for endpoint_id, reason in ((by_hand, "disabled by an operator"), (gone, "410 Gone")):
        conn.execute(queries["disable_endpoint"], {"id": endpoint_id, "reason": reason})
    conn.commit()

    async def scrape() -> str:
        async with serving(Metrics(), connect=dsn_connector(dsn)) as client:
            return (await client.get("/metrics")).text

    text = run(scrape())
    assert "# TYPE outbox_endpoint_enabled gauge\n" in text
    assert [gauge(text, "outbox_endpoint_enabled", name)
            for name in ("live", "paused", "gone")] == [1.0, 0.0, 0.0]


def test_scrape_answers_while_the_database_is_down() -> None:
    """With the database unreachable /metrics still answers 200 with the counters."""
    metrics = Metrics()
    metrics.dead("workflow")

    async def scrape() -> list[httpx.Response]:
        async with serving(metrics, connect=dsn_connector(closed_port_dsn())) as client:
            return [await client.get("/metrics"), await client.get("/metrics")]

    for response in run(scrape()):
        assert response.status_code == 200
        assert gauge(response.text, "outbox_dead_letters_total", "workflow") == 1
        assert "# TYPE outbox_pending gauge" in response.text
        assert "outbox_pending{" not in response.text


def test_scrape_answers_when_the_database_hangs() -> None:
    """A refresh that does not finish in scrape_timeout is abandoned; the last snapshot stays."""
    clock = [100.0]
    metrics = Metrics(clock=lambda: clock[0])
    metrics.record_backlog([BacklogRow("workflow", 7, 3.0)])
    clock[0] += 10.0  # old enough to be measured again, not yet stale
    entered = []

    @asynccontextmanager
    async def hanging() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        entered.append(True)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
        yield  # pragma: no cover

    async def scrape() -> httpx.Response:
        async with serving(metrics, connect=hanging, scrape_timeout=0.2) as client:
            return await client.get("/metrics")

    response = run(scrape())
    assert entered == [True]
    assert response.status_code == 200
    assert gauge(response.text, "outbox_pending", "workflow") == 7


def test_scrape_answers_when_the_server_never_speaks() -> None:
    """A database port that accepts but never answers cannot hold a scrape past its timeout."""
    metrics = Metrics()
    metrics.delivered("workflow", 0.1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]

        async def scrape() -> httpx.Response:
            connect = dsn_connector(f"postgresql://outbox@127.0.0.1:{port}/outbox")
            async with serving(metrics, connect=connect, scrape_timeout=0.3) as client:
                return await client.get("/metrics")

        response = run(scrape())
    assert response.status_code == 200
    assert gauge(response.text, "outbox_delivered_total", "workflow") == 1


def test_health_endpoints_follow_the_callables() -> None:
    """/healthz follows is_alive and /readyz follows is_ready: 200 when true, 503 when false."""
    state = {"alive": True, "ready": False}

    async def probe() -> list[tuple[str, int, str]]:
        seen = []
        async with serving(alive=lambda: state["alive"], ready=lambda: state["ready"]) as client:
            for alive, ready in [(True, False), (True, True), (False, True)]:
                state.update(alive=alive, ready=ready)
                for path in ("/healthz", "/readyz"):
                    response = await client.get(path)
                    seen.append((path, response.status_code, response.text))
        return seen

    seen = run(probe())
    assert [(p, s) for p, s, _ in seen] == [
        ("/healthz", 200), ("/readyz", 503),
        ("/healthz", 200), ("/readyz", 200),
        ("/healthz", 503), ("/readyz", 200),
    ]
    assert seen[0][2] == "ok\n"
    assert "database" in seen[1][2]


def test_probe_that_raises_reports_not_healthy() -> None:
    """A liveness or readiness callable that raises answers 503, never a crash or a 500."""
    def broken() -> bool:
        raise RuntimeError("boom")

    async def probe() -> list[int]:
        async with serving(alive=broken, ready=broken) as client:
            return [(await client.get(p)).status_code for p in ("/healthz", "/readyz", "/healthz")]

    assert run(probe()) == [503, 503, 503]


def test_other_paths_methods_and_head() -> None:
    """Unknown paths get 404, other methods 405, HEAD the headers without a body."""
    async def probe() -> list[httpx.Response]:
        async with serving() as client:
            return [await client.get("/nope"), await client.post("/metrics", content=b"x"),
                    await client.head("/healthz"), await client.head("/metrics"),
                    await client.get("/healthz?verbose=1")]

    missing, post, head, head_metrics, query = run(probe())
    assert missing.status_code == 404
    assert post.status_code == 405
    assert post.headers["allow"] == "GET, HEAD"
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == "3"
    assert head_metrics.status_code == 200
    assert head_metrics.content == b""
    assert query.status_code == 200


def test_malformed_request_and_idle_client_do_not_stall_the_server() -> None:
    """A garbage request line gets 400, and stop() returns while a client sits idle."""
    async def probe() -> bytes:
        server = HealthServer(Metrics(), is_alive=lambda: True, is_ready=lambda: True,
                              host="127.0.0.1", port=0)
        await server.start()
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"NONSENSE\r\n\r\n")
        answer = await reader.read()
        writer.close()
        await server.stop()
        assert await idle_reader.read() == b""  # closed by stop(), never answered
        idle_writer.close()
        return answer

    assert run(probe()).startswith(b"HTTP/1.1 400 ")


def test_port_in_use_is_a_clear_error() -> None:
    """Starting on a port that is taken raises OSError naming the address."""
    async def clash() -> str:
        first = HealthServer(Metrics(), is_alive=lambda: True, is_ready=lambda: True,
                             host="127.0.0.1", port=0)
        async with first:
            second = HealthServer(Metrics(), is_alive=lambda: True, is_ready=lambda: True,
                                  host="127.0.0.1", port=first.port)
            try:
                await second.start()
            except OSError as exc:
                return str(exc)
        raise AssertionError("second server started on a busy port")

    assert "cannot listen for metrics on 127.0.0.1:" in run(clash())



def test_a_failing_render_answers_500_and_the_server_keeps_serving() -> None:
    """An unexpected error while answering gives a 500 for that request only."""
    class Broken(Metrics):
        def render(self) -> bytes:
            raise RuntimeError("bug")

    async def probe() -> list[int]:
        async with serving(Broken()) as client:
            return [(await client.get(p)).status_code for p in ("/metrics", "/healthz")]

    assert run(probe()) == [500, 200]


def test_the_probes_answer_while_a_long_render_runs() -> None:
    """A render that takes seconds of CPU (5,000 endpoints take about 3.7 s) runs beside
    the loop: /healthz and /readyz answer meanwhile, well within a kubelet's 1 s; two
    scrapes that come while it runs share it."""
    renders: list[float] = []

    class Slow(Metrics):
        def render(self) -> bytes:
            renders.append(time.monotonic())
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:  # busy, as a long render is
                sum(range(1000))
            return super().render()

    async def probe() -> tuple[list[float], list[int]]:
        async with serving(Slow()) as client:
            scrapes = [asyncio.create_task(client.get("/metrics")) for _ in range(2)]
            await asyncio.sleep(0.3)
            waits = []
            for path in ("/healthz", "/readyz") * 3:
                started = time.monotonic()
                assert (await client.get(path)).status_code == 200
                waits.append(time.monotonic() - started)
            return waits, [(await scrape).status_code for scrape in scrapes]

    waits, scraped = run(probe())
    assert scraped == [200, 200]
    assert len(renders) == 1
    assert max(waits) < 1.0, waits


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 0.05) == b""
    except TimeoutError:
        return False  # still open, waiting for our head
    except ConnectionError:
        return True  # reset


def test_connections_past_the_limit_close_the_oldest_silent_ones_first() -> None:
    """With MAX_CLIENTS silent connections and one halfway through its head, newcomers
    close the oldest silent ones; the one that spoke is kept, and a request is answered."""
    async def probe() -> tuple[list[bool], bool, bytes]:
        server = HealthServer(Metrics(), is_alive=lambda: True, is_ready=lambda: True,
                              host="127.0.0.1", port=0)
        await server.start()
        talker_reader, talker = await asyncio.open_connection("127.0.0.1", server.port)
        talker.write(b"GET /healthz HTTP/1.1\r\n")  # half a head, the rest later
        await talker.drain()
        silent = [await asyncio.open_connection("127.0.0.1", server.port)
                  for _ in range(MAX_CLIENTS)]
        await asyncio.sleep(0.2)
        closed = [await closed_by_server(reader) for reader, _ in silent]
        talker.write(b"\r\n")
        answer = await asyncio.wait_for(talker_reader.read(), 5)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
        fresh = await asyncio.wait_for(reader.read(), 5)
        for _, w in silent:
            w.close()
        writer.close()
        talker.close()
        await server.stop()
        return closed, answer.startswith(b"HTTP/1.1 200 "), fresh

    closed, talker_answered, fresh = run(probe())
    assert talker_answered  # kept though it was the oldest
    assert closed[:1] == [True]  # the oldest silent one made room for the last
    assert sum(closed) == 1
    assert fresh.startswith(b"HTTP/1.1 200 ")


def big_metrics() -> Metrics:
    """Metrics of 48 endpoints: about 160 KB, more than a slow reader's and the kernel's
    buffers take."""
    metrics = Metrics()
    metrics.known_endpoints([f"endpoint-{n:02d}" for n in range(48)])
    return metrics


async def slow_reader(port: int) -> socket.socket:
    """A client that sends ``GET /metrics`` and never reads: a receive buffer of a few KiB
    and Ethernet's segment size (with loopback's, the kernel would take the whole answer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, b"GET /metrics HTTP/1.1\r\n\r\n")
    return sock


def was_reset(sock: socket.socket) -> bool:
    """Whether the server has reset the connection (nothing of it is read)."""
    poll = select.poll()
    poll.register(sock, select.POLLHUP | select.POLLERR)
    return bool(poll.poll(0))


async def wait_reset(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the server resets ``sock``; None if it does not within ``timeout``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while loop.time() - started < timeout:
        if was_reset(sock):
            return loop.time() - started
        await asyncio.sleep(0.02)
    return None


async def raw_get(port: int, path: str) -> bytes:
    """One request on a fresh connection; the status line of its answer (5 s at most)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    try:
        return (await asyncio.wait_for(reader.readline(), 5)).strip()
    finally:
        writer.close()


def test_a_reader_that_takes_no_answer_is_reset_at_the_write_timeout() -> None:
    """An answer not taken within write_timeout is dropped with a reset, not waited on."""
    async def probe() -> tuple[bool, float | None, bytes]:
        server = HealthServer(big_metrics(), is_alive=lambda: True, is_ready=lambda: True,
                              host="127.0.0.1", port=0, write_timeout=0.5)
        async with server:
            sock = await slow_reader(server.port)
            early = was_reset(sock)
            after = await wait_reset(sock, 3.0)
            sock.close()
            return early, after, await raw_get(server.port, "/healthz")

    early, after, health = run(probe())
    assert not early
    assert after is not None
    assert after < 2.0
    assert health == b"HTTP/1.1 200 OK"


def test_slow_scrapes_leave_room_for_the_probes_and_overdue_ones_go_first() -> None:
    """MAX_SCRAPES stuck /metrics answers: one more scrape gets 503 at once, /healthz and
    /readyz answer; once overdue, a stuck answer makes room for a scrape, and for a
    newcomer at the connection limit before any silent connection does."""
    async def probe() -> dict[str, Any]:
        server = HealthServer(big_metrics(), is_alive=lambda: True, is_ready=lambda: True,
                              host="127.0.0.1", port=0)
        async with server:
            stuck = [await slow_reader(server.port) for _ in range(MAX_SCRAPES)]
            seen: dict[str, Any] = {"scrape": await raw_get(server.port, "/metrics"),
                                    "healthz": await raw_get(server.port, "/healthz"),
                                    "readyz": await raw_get(server.port, "/readyz"),
                                    "in time": not any(map(was_reset, stuck))}
            await asyncio.sleep(1.2)  # the stuck answers become overdue (1 s)
            seen["late scrape"] = await raw_get(server.port, "/metrics")
            seen["first reset"] = await wait_reset(stuck[0], 1.0)
            stuck.append(await slow_reader(server.port))  # MAX_SCRAPES again, one in time
            silent = [await asyncio.open_connection("127.0.0.1", server.port)
                      for _ in range(MAX_CLIENTS - MAX_SCRAPES)]  # every slot taken
            seen["late healthz"] = await raw_get(server.port, "/healthz")
            seen["second reset"] = await wait_reset(stuck[1], 1.0)
            seen["silent closed"] = [await closed_by_server(r) for r, _ in silent]
            for sock in stuck:
                sock.close()
            for _, writer in silent:
                writer.close()
        return seen

    seen = run(probe())
    assert seen["scrape"] == b"HTTP/1.1 503 Service Unavailable"
    assert seen["healthz"] == seen["readyz"] == seen["late healthz"] == b"HTTP/1.1 200 OK"
    assert seen["in time"]
    assert seen["late scrape"] == b"HTTP/1.1 200 OK"  # an overdue scrape made room
    assert seen["first reset"] is not None
    assert seen["second reset"] is not None  # the oldest overdue one, not a silent one
    assert not any(seen["silent closed"])


async def burst_after(port: int, first: bytes, then: bytes) -> tuple[socket.socket,
                                                                      list[socket.socket]]:
    """One connection that sends ``first`` (maybe nothing), then seven that send ``then``
    (maybe nothing), all made while the loop does not turn: the kernel queues them in
    this order (no more than the listen backlog) and the server accepts them together."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    for sock, data in zip(socks, [first] + [then] * 7, strict=True):
        if data:
            sock.sendall(data)
        sock.setblocking(False)
    await asyncio.sleep(0.2)  # all accepted; the loop has read what arrived
    return socks[0], socks[1:]


@pytest.mark.parametrize("sent", ["before the burst", "after the burst"])
def test_a_probe_is_not_closed_for_a_burst_of_scrapes(sent: str) -> None:
    """With every scrape slot held by an answer in time, a kubelet accepted in one turn
    with seven scrapes whose requests have arrived is answered 200, whether its own
    request arrived before them or only after they were accepted: the scrapes close
    each other. (Closing the oldest silent connection first once chose a kubelet that
    had connected but not yet sent.)"""
    healthz = b"GET /healthz HTTP/1.1\r\n\r\n"
    early = sent == "before the burst"

    async def probe() -> tuple[bytes, int]:
        server = HealthServer(big_metrics(), is_alive=lambda: True, is_ready=lambda: True,
                              host="127.0.0.1", port=0)
        async with server:
            stuck = [await slow_reader(server.port) for _ in range(MAX_SCRAPES)]
            kubelet, burst = await burst_after(server.port, healthz if early else b"",
                                               b"GET /metrics HTTP/1.1\r\n\r\n")
            loop = asyncio.get_running_loop()
            if not early:
                await loop.sock_sendall(kubelet, healthz)
            answer = await asyncio.wait_for(loop.sock_recv(kubelet, 1024), 5)
            dropped = sum(map(was_reset, burst))
            for sock in [*stuck, *burst, kubelet]:
                sock.close()
        return answer, dropped

    answer, dropped = run(probe())
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert dropped >= 3  # past the limit: the scrapes made room among themselves


def test_a_scrape_arrived_is_not_closed_for_a_burst_of_idle_connections() -> None:
    """With all but one scrape slot held by answers in time, a scrape whose request has
    arrived, accepted in one turn with seven connections that say nothing, is answered:
    the idle newcomers close each other."""
    async def probe() -> tuple[bytes, list[bool]]:
        server = HealthServer(big_metrics(), is_alive=lambda: True, is_ready=lambda: True,
                              host="127.0.0.1", port=0)
        async with server:
            stuck = [await slow_reader(server.port) for _ in range(MAX_SCRAPES - 1)]
            scraper, idle = await burst_after(server.port,
                                              b"GET /metrics HTTP/1.1\r\n\r\n", b"")
            loop = asyncio.get_running_loop()
            answer = b""
            async with asyncio.timeout(5):
                while chunk := await loop.sock_recv(scraper, 65536):
                    answer += chunk
            closed = [bool(select.select([sock], [], [], 0)[0]) for sock in idle]  # EOF
            for sock in [*stuck, *idle, scraper]:
                sock.close()
        return answer, closed

    answer, closed = run(probe())
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:100]
    assert answer.endswith(b"\n")
    assert len(answer) > 100_000
    assert closed == [True] * 3 + [False] * 4  # the oldest idle ones


def test_scrapes_share_a_render_only_while_another_answer_is_on_its_way() -> None:
    """Scrape after scrape, each answer taken, shows a counter moved just before; while a
    slow reader's answer is still being sent, a scrape within the second gets the text
    rendered before; a second later, a fresh one."""
    async def probe() -> list[float | None]:
        metrics = big_metrics()
        server = HealthServer(metrics, is_alive=lambda: True, is_ready=lambda: True,
                              host="127.0.0.1", port=0)
        seen: list[float | None] = []
        async with server, httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}",
                                             trust_env=False, timeout=5) as client:
            async def delivered() -> float | None:
                text = (await client.get("/metrics")).text
                return gauge(text, "outbox_delivered_total", "endpoint-00")

            metrics.delivered("endpoint-00", 0.1)
            seen.append(await delivered())  # 1: fresh
            metrics.delivered("endpoint-00", 0.1)
            seen.append(await delivered())  # 2: fresh again, no answer was in flight
            stuck = await slow_reader(server.port)
            await asyncio.sleep(0.1)  # its answer is being sent, at its pace
            metrics.delivered("endpoint-00", 0.1)
            seen.append(await delivered())  # shared: the stuck reader's render, 2
            await asyncio.sleep(1.1)
            seen.append(await delivered())  # older than a second: fresh, 3
            stuck.close()
        return seen

    assert run(probe()) == [1.0, 2.0, 2.0, 3.0]
