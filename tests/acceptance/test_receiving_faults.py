"""Exactly-once effects under real faults: deliveries really arrive twice, the work happens once.

The receivers are the documented examples (docs/examples/), served for real
and fed by the real dispatcher. A saboteur wrapped around an example acts
after its handler committed and before its answer leaves: it drops the
connection (the dispatcher sees a connection error and retries) or SIGSTOPs
the dispatcher, which is then SIGKILLed and replaced. Either way the event
arrives again, and the example's ``first_time`` keeps its effect single.
"""

from __future__ import annotations

import base64
import signal
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import psycopg
import pytest

import outbox
from tests.support.faults import expire_leases
from tests.support.proxy import FaultProxy
from tests.support.receiving import effects, load_example, serve_asgi, serve_wsgi
from tests.support.resilience import (
    DispatcherProcess,
    Fleet,
    add_endpoint,
    all_delivered,
    delivery_row,
    wait_until,
)

pytestmark = pytest.mark.slow

SECRET = "whsec_" + base64.b64encode(b"the receiver's secret, 32 bytes!").decode()
# What a saboteur does to a request: (webhook-id, its attempt here, the peer's port).
Act = Callable[[str, int, int], None]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


class Arrivals:
    """Counts each webhook-id's requests to one receiver; thread-safe."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def arrive(self, webhook_id: str) -> int:
        with self._lock:
            self.counts[webhook_id] += 1
            return self.counts[webhook_id]


def asgi_saboteur(app: Any, arrivals: Arrivals, act: Act) -> Any:
    """``app`` whose answer start calls ``act`` first: after the handler committed."""
    async def wrapped(scope: Scope, receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        webhook_id = dict(scope["headers"]).get(b"webhook-id", b"").decode()
        attempt = arrivals.arrive(webhook_id)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                act(webhook_id, attempt, scope["client"][1])
            await send(message)

        await app(scope, receive, sending)
    return wrapped


def wsgi_saboteur(app: Any, arrivals: Arrivals, act: Act) -> Any:
    """``app`` that calls ``act`` once it returned (committed), before a byte is written."""
    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        webhook_id = environ.get("HTTP_WEBHOOK_ID", "")
        attempt = arrivals.arrive(webhook_id)
        result = app(environ, start_response)
        act(webhook_id, attempt, int(environ.get("REMOTE_PORT", 0)))
        return result
    return wrapped


def example(name: str, receiver_db: str) -> Any:
    """The documented example's app, signed with SECRET, working on ``receiver_db``."""
    module = load_example(name, {"WEBHOOK_SECRETS": SECRET, "DATABASE_URL": receiver_db})
    return module.app


def publish_orders(dsn: str, count: int) -> list[str]:
    """``count`` mail.received events with message ids 1..count, committed; their ids."""
    with psycopg.connect(dsn) as conn:
        ids = outbox.publish_many(conn, [outbox.Event("mail.received", {"message_id": n})
                                         for n in range(1, count + 1)])
        conn.commit()
    return [str(i) for i in ids]


def inbox(dsn: str) -> Counter[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return Counter((str(c), str(e)) for c, e in
                       conn.execute("SELECT consumer, event_id FROM outbox.inbox"))


def test_answer_lost_after_the_commit_the_retry_is_absorbed(
        dsn: str, receiver_db: str, fleet: Fleet) -> None:
    """The connection drops after each first commit: every event arrives twice, ships once."""
    arrivals = Arrivals()
    proxies: list[FaultProxy] = []

    def drop(_: str, attempt: int, port: int) -> None:
        if attempt == 1:  # cut this request's connection: the answer never arrives
            assert proxies[0].reset(lambda link: link.upstream_port == port) == 1

    app = asgi_saboteur(example("receive_starlette", receiver_db), arrivals, drop)
    with serve_asgi(app) as base:
        port = int(base.rsplit(":", 1)[1])
        with FaultProxy(port) as proxy:
            proxies.append(proxy)
            add_endpoint(dsn, proxy.url("/hooks"), secret=SECRET, timeout_seconds=2.0)
            ids = publish_orders(dsn, 5)
            fleet.start()
            wait_until(lambda: all_delivered(dsn, 5), 30, "every event delivered")
    assert {i: arrivals.counts[i] for i in ids} == dict.fromkeys(ids, 2)
    assert effects(receiver_db, "mail_notices") == [(n, i) for n, i in enumerate(ids, 1)]
    assert inbox(receiver_db) == Counter(("notify", i) for i in ids)
    assert all(delivery_row(dsn, i)["attempts"] == 2 for i in ids)


def test_dispatcher_killed_after_its_post_each_consumer_works_once(
        dsn: str, receiver_db: str, fleet: Fleet) -> None:
    """SIGKILLed after a POST was committed: re-sent by its successor; once per consumer."""
    arrivals = {"starlette": Arrivals(), "flask": Arrivals()}
    first: list[DispatcherProcess] = []
    stopped = threading.Event()

    def freeze(_: str, attempt: int, __: int) -> None:
        if attempt == 1 and not stopped.is_set():
            stopped.set()
            first[0].signal(signal.SIGSTOP)  # the answer below is never read

    starlette = asgi_saboteur(example("receive_starlette", receiver_db), arrivals["starlette"],
                              freeze)
    flask = wsgi_saboteur(example("receive_flask", receiver_db), arrivals["flask"], freeze)
    with serve_asgi(starlette) as notify, serve_wsgi(flask) as archive:
        add_endpoint(dsn, f"{notify}/hooks", "notify", secret=SECRET, timeout_seconds=2.0)
        add_endpoint(dsn, f"{archive}/hooks", "archive", secret=SECRET, timeout_seconds=2.0)
        first.append(fleet.start())
        ids = publish_orders(dsn, 3)
        assert stopped.wait(20), "no request reached a receiver"
        first[0].kill()
        assert expire_leases(dsn) >= 1
        fleet.start()
        wait_until(lambda: all_delivered(dsn, 6), 30, "every event delivered to both")
    repeats = sum(c - 1 for a in arrivals.values() for c in a.counts.values())
    assert repeats >= 1  # the killed dispatcher's delivery really arrived twice
    assert effects(receiver_db, "mail_notices") == [(n, i) for n, i in enumerate(ids, 1)]
    assert effects(receiver_db, "mail_archive") == [(n, i) for n, i in enumerate(ids, 1)]
    assert inbox(receiver_db) == Counter([("notify", i) for i in ids] +
                                         [("archive", i) for i in ids])
