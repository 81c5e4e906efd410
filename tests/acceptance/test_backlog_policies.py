"""The endpoints' policies with real dispatchers, publishers and receivers: drop-oldest across
a fleet and concurrent publishers, a tenant past its own bound, "stop sending" from the
command line, dead letters kept for a time, and a database a --databases fleet serves
without pinned connections."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox.testing import Receiver, Request, Response
from tests.conftest import Cluster
from tests.support.cli import run_outbox
from tests.support.dispatcher import Dispatcher, wait_until
from tests.support.resilience import Fleet, add_endpoint, summary

N = 40
"""The drop-oldest endpoints' --max-pending."""


def _count(dsn: str, query: str, *params: Any) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query.encode(), params).fetchone()
    assert row is not None
    return int(row[0])


def _undelivered(dsn: str, endpoint: str) -> int:
    return _count(dsn, "SELECT count(*) FROM outbox.deliveries d JOIN outbox.endpoints e "
                  "ON e.id = d.endpoint_id WHERE e.name = %s "
                  "AND d.state IN ('pending', 'in_flight')", endpoint)


def _states(dsn: str, endpoint: str) -> dict[str, list[int]]:
    """The endpoint's deliveries' seqs by state."""
    found: dict[str, list[int]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for state, seq in conn.execute(
                "SELECT d.state, d.seq FROM outbox.deliveries d JOIN outbox.endpoints e "
                "ON e.id = d.endpoint_id WHERE e.name = %s ORDER BY d.seq", (endpoint,)):
            found.setdefault(str(state), []).append(int(seq))
    return found


class Publishers:
    """Threads each publishing on a connection of its own, a few events a transaction, until
    stopped; every commit's time kept, and anything publish() raised."""

    def __init__(self, dsn: str, count: int, **event: Any) -> None:
        self.dsn = dsn
        self.event = event
        self.stop = threading.Event()
        self.commits: list[float] = []
        self.errors: list[BaseException] = []
        self.published = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(count)]

    def _run(self, n: int) -> None:
        rng = random.Random(n)
        try:
            with psycopg.connect(self.dsn) as conn:
                while not self.stop.is_set():
                    size = rng.randint(1, 5)
                    outbox.publish_many(conn, [outbox.Event("order.created", {"n": i},
                                                            **self.event)
                                               for i in range(size)])
                    conn.commit()
                    with self._lock:
                        self.commits.append(time.monotonic())
                        self.published += size
                    time.sleep(rng.uniform(0.0, 0.03))
        except BaseException as exc:
            self.errors.append(exc)

    def __enter__(self) -> Publishers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def test_drop_oldest_holds_for_a_fleet_and_concurrent_publishers(
        dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """Four publishing connections, two dispatchers, --max-pending 40 drop-oldest and a
    receiver that holds every request: publish() never raises; within 5 s of the last commit
    the endpoint holds exactly 40 undelivered; the discarded are older than every one kept;
    nothing in flight is discarded; the other endpoint of the same events keeps all of
    them; outbox_dropped_total over both dispatchers counts exactly the discarded rows."""
    held = threading.Event()

    async def respond(request: Request) -> Response:
        if request.path.endswith("/drops"):
            while not held.is_set():
                await asyncio.sleep(0.05)
        return Response(200)

    receiver.responder = respond
    add_endpoint(dsn, receiver.url + "drops", name="drops", max_pending=N,
                 when_full="drop-oldest", max_in_flight=4, timeout_seconds=120.0)
    add_endpoint(dsn, receiver.url + "keeps", name="keeps", enabled=False)
    dispatchers = [fleet.start(), fleet.start()]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    try:
        seen_during = 0
        with Publishers(dsn, 4) as publishers:
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                time.sleep(0.25)
                seen_during = max(seen_during, len(_states(dsn, "drops").get("discarded", [])))
        assert publishers.errors == []
        last_commit = max(publishers.commits)
        wait_until(lambda: _undelivered(dsn, "drops") <= N, 15, "the bound to hold again")
        within = time.monotonic() - last_commit
        states = _states(dsn, "drops")
        assert seen_during > 0  # discarded while the publishers went on, not at the end only
        assert within <= 5.0, f"back to the bound {within:.1f} s after the last commit"
        assert len(states["pending"]) + len(states["in_flight"]) == N
        assert max(states["discarded"]) < min(states["pending"])
        sent = {r.header("webhook-id") for r in receiver.snapshot() if r.path.endswith("/drops")}
        with psycopg.connect(dsn, autocommit=True) as conn:
            fates = {str(event): str(state) for event, state in conn.execute(
                "SELECT d.event_id, d.state FROM outbox.deliveries d JOIN outbox.endpoints e "
                "ON e.id = d.endpoint_id WHERE e.name = 'drops'")}
        assert sent
        assert {fates[str(event)] for event in sent} == {"in_flight"}
        everything = sorted(states["pending"] + states["in_flight"] + states["discarded"])
        assert _states(dsn, "keeps") == {"pending": everything}
        assert len(everything) == publishers.published
        counted = sum(d.metric("outbox_dropped_total") for d in dispatchers)
        assert counted == len(states["discarded"])
        summary("drop-oldest, a fleet", published=publishers.published,
                discarded=len(states["discarded"]), in_flight=len(states["in_flight"]),
                back_within_seconds=round(within, 2),
                counted_by=[d.metric("outbox_dropped_total") for d in dispatchers])
    finally:
        held.set()


def test_a_maintainer_frozen_and_woken_counts_nothing_twice(dsn: str, fleet: Fleet) -> None:
    """The maintainer frozen (SIGSTOP) while publishers go on: the other dispatcher takes
    the lease over and discards; the frozen one, woken, goes on as a member of the fleet. The
    bound holds exactly, and the counts of both add up to the discarded rows. (Two looks at
    once are tests/integration/test_drop_oldest.py's.)"""
    add_endpoint(dsn, "http://127.0.0.1:9/", name="drops", max_pending=20,
                 when_full="drop-oldest", enabled=False)
    dispatchers = [fleet.start(), fleet.start()]
    for dispatcher in dispatchers:
        dispatcher.wait_status("/readyz", 200)
    with Publishers(dsn, 2) as publishers:
        first = wait_until(lambda: next((d for d in dispatchers
                                         if d.metric("outbox_dropped_total")), None),
                           15, "the maintainer's first discard")
        other = next(d for d in dispatchers if d is not first)
        first.signal(signal.SIGSTOP)
        try:
            wait_until(lambda: other.metric("outbox_dropped_total"), 30,
                       "the other dispatcher to take the discarding over")
        finally:
            first.signal(signal.SIGCONT)
        time.sleep(3.0)  # the woken one's next steps, beside its successor
    assert publishers.errors == []
    wait_until(lambda: _undelivered(dsn, "drops") == 20, 10, "the bound to hold again")
    time.sleep(1.5)  # a last look by each, if any
    discarded = len(_states(dsn, "drops")["discarded"])
    assert sum(d.metric("outbox_dropped_total") for d in dispatchers) == discarded
    assert _undelivered(dsn, "drops") == 20
    assert discarded + 20 == publishers.published


def test_a_tenant_past_its_bound_loses_only_its_own(dsn: str, fleet: Fleet) -> None:
    """--max-pending-per-tenant 5 at a disabled drop-oldest endpoint: acme's backlog comes
    back to its newest 5 within seconds; globex's 3 and those without a tenant stay."""
    add_endpoint(dsn, "http://127.0.0.1:9/", name="drops", max_pending=1000,
                 max_pending_per_tenant=5, when_full="drop-oldest", enabled=False)
    dispatcher = fleet.start()
    dispatcher.wait_status("/readyz", 200)
    with psycopg.connect(dsn) as conn:
        for tenant, count in (("globex", 3), ("acme", 20), (None, 2)):
            outbox.publish_many(conn, [outbox.Event("order.created", {"n": i}, tenant=tenant)
                                       for i in range(count)])
            conn.commit()

    def by_tenant() -> dict[str | None, int]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return {tenant: int(n) for tenant, n in conn.execute(
                "SELECT tenant, count(*) FROM outbox.deliveries WHERE state = 'pending' "
                "GROUP BY tenant")}

    wait_until(lambda: by_tenant().get("acme") == 5, 10, "acme's backlog at its bound")
    assert by_tenant() == {"acme": 5, "globex": 3, None: 2}
    assert dispatcher.metric("outbox_dropped_total") == 15


def test_stop_sending_from_the_command_line(dsn: str, receiver: Receiver, fleet: Fleet) -> None:
    """disable --drop prints how many it discarded; what is published meanwhile is discarded
    by the dispatcher (reason disabled); replay and retry-now count 0; list --json says
    dropping, by the operator; enable delivers what is published after it, and only that."""
    add_endpoint(dsn, receiver.url, name="hooks")
    dispatcher = fleet.start()
    dispatcher.wait_status("/readyz", 200)
    assert run_outbox(dsn, "endpoints", "disable", "hooks").returncode == 0
    [listed] = json.loads(run_outbox(dsn, "endpoints", "list", "--json").stdout)
    assert (listed["dropping"], listed["disabled_by"]) == (False, "operator")
    with psycopg.connect(dsn) as conn:
        for _ in range(3):
            outbox.publish(conn, "order.created", {})
        conn.commit()
    done = run_outbox(dsn, "endpoints", "disable", "hooks", "--drop")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3\n"
    assert "discarded its 3 pending deliveries" in done.stderr
    with psycopg.connect(dsn) as conn:
        for _ in range(2):
            outbox.publish(conn, "order.created", {})
        conn.commit()
    wait_until(lambda: _states(dsn, "hooks").keys() == {"discarded"}, 10,
               "what was published meanwhile to be discarded")
    assert len(_states(dsn, "hooks")["discarded"]) == 5
    assert dispatcher.metric("outbox_dropped_total") == 2
    replay = run_outbox(dsn, "replay", "--endpoint", "hooks", "--since", "1h")
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout.startswith("0 events replayed")
    assert "disabled with --drop" in replay.stderr
    retry = run_outbox(dsn, "endpoints", "retry-now", "hooks")
    assert (retry.returncode, retry.stdout) == (0, "0\n")
    [listed] = json.loads(run_outbox(dsn, "endpoints", "list", "--json").stdout)
    assert (listed["enabled"], listed["dropping"], listed["disabled_by"]) == \
        (False, True, "operator")
    assert run_outbox(dsn, "endpoints", "enable", "hooks").returncode == 0
    with psycopg.connect(dsn) as conn:
        after = outbox.publish(conn, "order.created", {})
        conn.commit()
    receiver.wait_for(1, timeout=15)
    time.sleep(0.5)  # nothing else comes
    assert [r.header("webhook-id") for r in receiver.snapshot()] == [str(after)]


def test_dead_letters_kept_for_a_time(dsn: str, fleet: Fleet) -> None:
    """--keep-dead 1h: the maintainer discards a dead letter that died two hours ago, keeps
    one of ten minutes ago, and counts it (reason dead-expired)."""
    add_endpoint(dsn, "http://127.0.0.1:9/", name="hooks", keep_dead_seconds=3600.0)
    with psycopg.connect(dsn) as conn:
        old = outbox.publish(conn, "order.created", {})
        recent = outbox.publish(conn, "order.created", {})
        for event, ago in ((old, "2 hours"), (recent, "10 minutes")):
            conn.execute("UPDATE outbox.deliveries SET state = 'dead', last_error = 'HTTP 500', "
                         "finished_at = now() - %s::interval WHERE event_id = %s", (ago, event))
        conn.commit()
    dispatcher = fleet.start()
    wait_until(lambda: _states(dsn, "hooks").get("discarded"), 15, "the old dead letter to go")
    assert _count(dsn, "SELECT count(*) FROM outbox.deliveries WHERE state = 'dead' "
                  "AND event_id = %s", recent) == 1
    assert dispatcher.metric("outbox_dropped_total") == 1


@pytest.fixture
def cold(cluster: Cluster, template_db: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A database of its own, listed alone in a databases file: its DSN and the file."""
    name = f"cold_{uuid.uuid4().hex[:8]}"
    with cluster.admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template_db)))
    dsn = cluster.dsn_for(name)
    path = tmp_path / "databases.toml"
    path.write_text(f'refresh = "60s"\n\n[[database]]\nname = "cold"\ndsn = {dsn!r}\n',
                    encoding="utf-8")
    try:
        yield dsn, path
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def test_a_database_served_without_pinned_connections_is_held_to_its_bound(
        cold: tuple[str, Path]) -> None:
    """--databases: a database whose only endpoint is disabled has no work due and no pinned
    connections; publishing past its drop-oldest bound makes its look find work, and its
    backlog comes back to the bound, counted with the database's label."""
    dsn, path = cold
    add_endpoint(dsn, "http://127.0.0.1:9/", name="drops", max_pending=3,
                 when_full="drop-oldest", enabled=False)
    with Dispatcher(None, "--databases", str(path)) as dispatcher:
        dispatcher.wait_serving()
        with psycopg.connect(dsn) as conn:
            outbox.publish_many(conn, [outbox.Event("order.created", {"n": i})
                                       for i in range(10)])
            conn.commit()
        wait_until(lambda: _undelivered(dsn, "drops") == 3, 20, "the bound to hold",
                   dispatcher=dispatcher)
        text = dispatcher.get("/metrics").text
    assert ('outbox_dropped_total{database="cold",endpoint="drops",reason="backlog-full"} 7.0'
            in text)
