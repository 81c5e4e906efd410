"""The demo's run: publish, dispatch and receive on a throwaway cluster, then clean up.

With nothing configured it starts a private PostgreSQL
(:class:`outbox._postgres.TemporaryPostgres`), migrates it, adds one endpoint
pointing at a flaky local receiver (:mod:`outbox.demo.receiver`), publishes
orders in real transactions (a few rolled back on purpose) and runs the real
dispatcher until every committed event has arrived, and the one event the
receiver refuses is a dead letter. With ``keep``, the cluster stays until
SIGINT or SIGTERM once the summary is out, for ``outbox status`` and
``outbox show`` to look at.

The dispatcher runs as a child process in a session of its own, not inside
this process: it keeps its own signal handling, and a Ctrl-C in the terminal
reaches only the demo, which then stops the child with SIGTERM. Everything
started is pushed on one ExitStack, unwound with further SIGINT/SIGTERM
ignored, so that an impatient second Ctrl-C cannot leave a cluster behind.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import psycopg

from outbox import admin
from outbox._postgres import TemporaryPostgres
from outbox._shared.dsn import server_options
from outbox.demo.process import DispatcherProcess
from outbox.demo.publisher import Publisher
from outbox.demo.receiver import ENDPOINT_TIMEOUT, FlakyEndpoint
from outbox.demo.watch import MAX_STREAK, QUIET_SECONDS, Watch
from outbox.endpoints import EndpointSpec, add_endpoint, generate_secret
from outbox.migrate import migrate
from outbox.sql import QueryName, queries
from outbox.testing import Receiver

MIN_BACKOFF, MAX_BACKOFF = 0.2, 2.0
_TICK = 0.1
_NEWS_SECONDS = 5.0


class DemoFailed(Exception):
    """The demo could not run to its end (exit 1)."""


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; everything was cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True, slots=True)
class Progress:
    published: int
    total: int
    delivered: int
    retries: int
    dead: int
    elapsed: float
    note: str | None = None
    """What the demo waits for, when progress stood still (or the circuit just opened)."""


@dataclass(frozen=True, slots=True)
class Summary:
    total: int
    publisher: Publisher
    endpoint: FlakyEndpoint
    recorded_delivered: int
    dead: int
    orders: int
    shipments: int
    """Rows the receiver shipped: one per event, duplicates absorbed."""
    elapsed: float
    """Seconds from the first publish to the last arrival."""
    dispatcher_exit: int | None
    """The dispatcher's exit code after SIGTERM (0: a graceful stop)."""
    kept: bool = False
    """The cluster stays until SIGINT or SIGTERM (``--keep``)."""
    circuit_openings: int = 0
    """How often the endpoint's circuit opened."""

    @property
    def ok(self) -> bool:
        ep = self.endpoint
        return (ep.accepted == self.total and self.orders == self.total
                and self.dead == (self.publisher.refused_id is not None)
                and self.shipments == self.total and ep.rolled_back_arrived == 0
                and ep.bad_signatures == 0 and ep.out_of_order == 0)


class Reporter(Protocol):
    def step(self, text: str) -> None: ...
    def progress(self, progress: Progress) -> None: ...
    def kept(self, summary: Summary, dsn: str) -> None:
        """The summary is ready and the cluster stays (``keep``): say how to look at it."""


@contextlib.contextmanager
def _signals() -> Iterator[list[bool]]:
    """SIGINT/SIGTERM raise Interrupted until the yielded flag's first item is set."""
    cleaning = [False]

    def handler(signum: int, _frame: FrameType | None) -> None:
        if not cleaning[0]:
            cleaning[0] = True  # one interruption is enough; later ones must not cut cleanup
            raise Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield cleaning
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def run_demo(total: int, reporter: Reporter, *, keep: bool = False) -> Summary:
    """Run the demo with ``total`` committed events; raises DemoFailed or Interrupted
    (with ``keep``, Interrupted is how it ends, after ``reporter.kept``)."""
    with _signals() as cleaning, ExitStack() as stack:
        try:
            return _run(total, reporter, stack, keep=keep)
        finally:
            cleaning[0] = True  # the ExitStack unwinds with signals ignored


def _run(total: int, reporter: Reporter, stack: ExitStack, *, keep: bool) -> Summary:
    server = stack.enter_context(TemporaryPostgres())
    version = _server_version(server.bindir)
    reporter.step(f"PostgreSQL {version} on 127.0.0.1:{server.port} "
                  f"(data in {server.base}, removed at the end"
                  + (", after Ctrl-C)" if keep else ")"))
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="outbox-demo-")))
    conn = stack.enter_context(psycopg.connect(server.dsn, autocommit=True,
                                               options=server_options(server.dsn),
                                               application_name="outbox-demo"))
    _, schema = migrate(conn)
    conn.execute(queries["demo_orders_table"])
    conn.execute(queries["demo_shipments_table"])
    reporter.step(f"schema migrated (version {schema}); business tables demo_orders "
                  "(the publisher's) and demo_shipments (the receiver's) created")

    secret = generate_secret()
    endpoint = FlakyEndpoint(secret, server.dsn)
    receiver = Receiver(endpoint.respond, record=False)
    stack.callback(_close_receiver, receiver, endpoint)
    receiver.start()
    with conn.transaction():
        add_endpoint(conn, EndpointSpec(
            name="demo-receiver", url=receiver.url, events=("order.*",), secret=secret,
            timeout=ENDPOINT_TIMEOUT, min_backoff=MIN_BACKOFF, max_backoff=MAX_BACKOFF,
            max_in_flight=64))
    reporter.step(f"endpoint demo-receiver -> {receiver.url} (signed with a fresh whsec_ "
                  f"secret; backoff {MIN_BACKOFF:g}-{MAX_BACKOFF:g} s, timeout "
                  f"{ENDPOINT_TIMEOUT:g} s); the receiver fails some attempts on purpose, "
                  "verifies with outbox.receive and ships once per event with first_time")

    dispatcher = DispatcherProcess(server.dsn, workdir / "dispatcher.log")
    stack.callback(dispatcher.stop)
    dispatcher.start()
    if not dispatcher.wait_ready():
        raise DemoFailed(f"the dispatcher did not start: {dispatcher.log_tail()}")
    reporter.step(f"dispatcher running (pid {dispatcher.pid}, metrics on "
                  f"http://127.0.0.1:{dispatcher.metrics_port}/metrics)")

    publisher = Publisher(server.dsn, total, endpoint.rolled_back)
    stack.callback(publisher.stop)
    reporter.step(f"publishing {total} order.created events, one order per transaction "
                  f"({publisher.keyed} keyed over {publisher.keys} customers; "
                  f"{publisher.rollbacks} more transactions rolled back on purpose)")
    publisher.start()
    watch = Watch()
    _wait(total, publisher=publisher, endpoint=endpoint, dispatcher=dispatcher, conn=conn,
          reporter=reporter, watch=watch)

    elapsed = max(endpoint.last_arrival - publisher.started_at, 1e-6)
    exit_code = dispatcher.stop()
    recorded = sum(e.delivered for e in admin.status(conn).endpoints)
    dead = _count(conn, "demo_dead_count")
    # The last progress line and the summary give one rate: to the last arrival.
    reporter.progress(Progress(published=publisher.committed, total=total,
                               delivered=endpoint.accepted, retries=endpoint.retries,
                               dead=dead, elapsed=elapsed))
    orders = _count(conn, "demo_order_count")
    shipments = _count(conn, "demo_shipment_count")
    summary = Summary(total=total, publisher=publisher, endpoint=endpoint,
                      recorded_delivered=recorded, dead=dead, orders=orders,
                      shipments=shipments, elapsed=elapsed, dispatcher_exit=exit_code,
                      kept=keep, circuit_openings=watch.openings)
    if keep:
        reporter.kept(summary, server.dsn)
        while True:  # until SIGINT or SIGTERM raises Interrupted; then all is removed
            time.sleep(1)
    return summary


def _wait(total: int, *, publisher: Publisher, endpoint: FlakyEndpoint,
          dispatcher: DispatcherProcess, conn: psycopg.Connection[Any],
          reporter: Reporter, watch: Watch) -> None:
    """Show progress until every committed event arrived and the dispatcher knows it.

    (Or was dead-lettered, or nothing moved for longer than the circuit's
    cool-down and the retry awaited, :meth:`Watch.patience`: a circuit that
    opens again after a failed probe is the breaker at work, and its next
    probe is awaited, up to :data:`MAX_STREAK` openings without an arrival.) An event shipped
    whose answer came too late arrived, but its delivery waits for the retry
    that comes back as a duplicate: the demo waits for that one too. When the
    circuit opens the progress says so; when it stands still for more than
    :data:`QUIET_SECONDS`, it says what it waits for.
    """
    dead, recorded, next_count = 0, 0, 0.0
    seen, last_change = -1, time.monotonic()
    news, news_until = "", 0.0
    moved, moved_at = -1, time.monotonic()  # arrivals, publishing or not
    while True:
        now = time.monotonic()
        if publisher.error:
            raise DemoFailed(f"publishing failed: {publisher.error}")
        code = dispatcher.poll()
        if code is not None:
            raise DemoFailed(f"the dispatcher exited early with code {code}: "
                             f"{dispatcher.log_tail()}")
        if now >= next_count:
            dead, next_count = _count(conn, "demo_dead_count"), now + 0.5
            recorded = sum(e.delivered for e in admin.status(conn).endpoints)
            watch.poll(conn)
        if watch.news is not None:  # shown for a few seconds, a line a second or not
            news, news_until, watch.news = watch.news, now + _NEWS_SECONDS, None
            if watch.streak <= MAX_STREAK:  # the breaker at work: its next probe is awaited
                last_change = now
        if endpoint.accepted + recorded != moved:
            moved, moved_at, watch.streak = endpoint.accepted + recorded, now, 0
        note = news if now < news_until else None
        if note is None and now - moved_at > QUIET_SECONDS:
            note = watch.waiting_for()
        reporter.progress(Progress(
            published=publisher.committed, total=total, delivered=endpoint.accepted,
            retries=endpoint.retries, dead=dead,
            elapsed=time.time() - publisher.started_at if publisher.started_at else 0.0,
            note=note))
        expected = publisher.committed + (publisher.refused_id is not None)
        if (publisher.done and endpoint.accepted + dead >= expected
                and recorded + dead >= expected):
            return
        if endpoint.accepted + recorded != seen or not publisher.done:
            seen, last_change = endpoint.accepted + recorded, now
        elif now - last_change > watch.patience():
            return
        time.sleep(_TICK)


def _close_receiver(receiver: Receiver, endpoint: FlakyEndpoint) -> None:
    if receiver.port:  # started
        endpoint.settle()
        receiver.close()


def _count(conn: psycopg.Connection[Any], query: QueryName) -> int:
    row = conn.execute(queries[query]).fetchone()
    return int(row[0]) if row else 0


def _server_version(bindir: Path) -> str:
    """``15.18`` from ``postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)``."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                             text=True, check=True, timeout=10).stdout
        match = re.search(r"\(PostgreSQL\) (\S+)", out)
        if match:
            return match.group(1)
    return "(unknown version)"
