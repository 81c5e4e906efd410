"""Upgrades with live data, and rolling deploys, against the project's own earlier releases.

Each earlier release runs from its sources (tests/fixtures/releases): its
own `outbox` command, `publish()` and dispatcher make and fill the database;
the new code upgrades it and goes on. In a rolling deploy the previous
release keeps publishing and dispatching beside the new code, and its own
`outbox migrate` (which re-applies its whole schema.sql) runs after ours.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from typing import Any

import psycopg
import pytest

import outbox
from outbox.migrate import SCHEMA_VERSION
from outbox.testing import Receiver, Request, Response
from tests.support.catalogue import catalogue, differences
from tests.support.cli import run_outbox
from tests.support.dispatcher import Dispatcher, run_once, wait_until
from tests.support.releases import Release, previous, releases

pytestmark = pytest.mark.slow


class _Endpoints:
    """A receiver with two paths: /ok answers 200; /bad 400 until it is fixed."""

    def __init__(self, rx: Receiver) -> None:
        self.rx = rx
        self.bad_fixed = False
        self._lock = threading.Lock()
        rx.responder = self.respond

    def respond(self, request: Request) -> Response:
        if request.path == "/bad" and not self.bad_fixed:
            return Response(400)
        return Response(200)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(r.body) for r in self.rx.requests
                    if r.path == path and r.method == "POST"]


def _old(release: Release, dsn: str, *args: str) -> str:
    result = release.run("outbox", *args, dsn=dsn)
    assert result.returncode == 0, f"{release} outbox {' '.join(args)}: {result.stderr}"
    return result.stdout


def _new(dsn: str, *args: str) -> str:
    result = run_outbox(dsn, *args)
    assert result.returncode == 0, f"outbox {' '.join(args)}: {result.stderr}"
    return result.stdout


def _states(dsn: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT p.name, d.state, count(*) FROM outbox.deliveries d "
                            "JOIN outbox.endpoints p ON p.id = d.endpoint_id "
                            "GROUP BY 1, 2").fetchall()
    return {(name, state): n for name, state, n in rows}


def _in_key_order(bodies: list[dict[str, Any]]) -> dict[str, list[int]]:
    by_key: dict[str, list[int]] = defaultdict(list)
    for body in bodies:
        by_key[body["key"]].append(body["data"]["n"])
    return dict(by_key)


@pytest.mark.parametrize("release", releases(), ids=str)
def test_upgrade_keeps_and_delivers_an_old_releases_data(release: Release, empty_dsn: str,
                                                         receiver: Receiver) -> None:
    """Delivered, pending keyed and dead deliveries of an old release survive the upgrade."""
    endpoints = _Endpoints(receiver)
    dsn = empty_dsn
    _old(release, dsn, "migrate")
    _old(release, dsn, "endpoints", "add", "ok", "--url", receiver.url + "ok",
         "--events", "order.*")
    _old(release, dsn, "endpoints", "add", "bad", "--url", receiver.url + "bad",
         "--events", "audit.*", "--max-attempts", "1")
    release.publish(dsn, [("order.created", f"k{n % 2}", n) for n in range(4)]
                    + [("audit.logged", None, 100 + n) for n in range(2)])
    old_run = release.dispatcher(dsn, once=True).start()
    assert old_run.wait(60) == 1, old_run.log()  # dead letters: exit 1
    release.publish(dsn, [("order.created", f"k{n % 2}", n) for n in range(4, 10)])
    before = _states(dsn)
    assert before == {("ok", "delivered"): 4, ("ok", "pending"): 6, ("bad", "dead"): 2}

    migrated = _new(dsn, "migrate")
    assert f"from version {release.version} to {SCHEMA_VERSION}" in migrated
    assert _states(dsn) == before
    dead = json.loads(_new(dsn, "dead", "list", "--json"))
    assert sorted(d["endpoint"] for d in dead) == ["bad", "bad"]
    endpoints.bad_fixed = True
    _new(dsn, "dead", "retry", "--endpoint", "bad")
    code, log = run_once(dsn)
    assert code == 0, log
    assert _states(dsn) == {("ok", "delivered"): 10, ("bad", "delivered"): 2}
    assert _in_key_order(endpoints.bodies("/ok")) == {"k0": [0, 2, 4, 6, 8],
                                                      "k1": [1, 3, 5, 7, 9]}
    assert sorted(b["data"]["n"] for b in endpoints.bodies("/bad")) == [100, 100, 101, 101]


def test_rolling_deploy_beside_the_previous_release(empty_dsn: str, dsn: str,
                                                    receiver: Receiver) -> None:
    """Previous release beside the new, its migrate after ours: none lost or twice, in order."""
    old, endpoints = previous(), _Endpoints(receiver)
    target = empty_dsn
    _old(old, target, "migrate")
    _old(old, target, "endpoints", "add", "ok", "--url", receiver.url + "ok",
         "--events", "order.*")
    old.publish(target, [("order.created", f"k{n % 3}", n) for n in range(6)])
    _new(target, "migrate")  # migrate first, then roll the pods
    total = 6

    def rounds(count: int, conn: psycopg.Connection[Any], *, old_migrate_at: int = -1) -> None:
        nonlocal total
        for round_ in range(count):
            start = total
            old.publish(target, [("order.created", f"k{n % 3}", n)
                                 for n in range(start, start + 5)])
            for n in range(start + 5, start + 10):
                outbox.publish(conn, "order.created", {"n": n}, key=f"k{n % 3}")
                conn.commit()
            total += 10
            if round_ == old_migrate_at:  # a pod not yet replaced starts: its own migrate
                assert "up to date" in _old(old, target, "migrate")
                _old(old, target, "status")
        wait_until(lambda: len(endpoints.bodies("/ok")) >= total or None, timeout=60,
                   what=f"{total} deliveries")

    old_dispatcher = old.dispatcher(target, "--log-level", "debug")
    new_dispatcher = Dispatcher(target, "--log-level", "debug")
    with old_dispatcher, psycopg.connect(target) as conn:
        rounds(1, conn)                            # the old pods alone
        with new_dispatcher:
            rounds(4, conn, old_migrate_at=1)      # old and new side by side
            assert old_dispatcher.stop() == 0, old_dispatcher.log()
            old_log = old_dispatcher.log()
            rounds(1, conn)                        # the old pods replaced
            assert new_dispatcher.process is not None
            assert new_dispatcher.process.poll() is None, new_dispatcher.log()
            new_log = new_dispatcher.log()
    assert "POST [" in old_log  # each delivered some
    assert "POST [" in new_log
    bodies = endpoints.bodies("/ok")
    ids = [b["id"] for b in bodies]
    assert len(ids) == len(set(ids)) == total  # nothing lost, nothing twice
    for key, ns in _in_key_order(bodies).items():
        assert ns == sorted(ns), key
    assert _states(target) == {("ok", "delivered"): total}
    assert differences(catalogue(target), catalogue(dsn)) == []
    assert "up to date" in _new(target, "migrate", "--check")


def test_an_earlier_publishers_delivery_to_a_tenants_endpoint_is_a_dead_letter(
        empty_dsn: str, receiver: Receiver) -> None:
    """The previous release's publish() routes by type alone, so during a rolling deploy it
    makes a delivery to a tenant's endpoint of an event that is not that tenant's: this
    dispatcher never sends it, and it becomes a dead letter that says why; the endpoint
    without a tenant gets the event as before."""
    old = previous()
    _old(old, empty_dsn, "migrate")
    _new(empty_dsn, "migrate")
    _new(empty_dsn, "endpoints", "add", "acme", "--url", receiver.url + "acme",
         "--events", "order.*", "--tenant", "acme")
    _new(empty_dsn, "endpoints", "add", "audit", "--url", receiver.url + "audit",
         "--events", "order.*")
    old.publish(empty_dsn, [("order.created", None, 1)])
    code, log = run_once(empty_dsn)
    assert code == 1, log
    assert [r.path for r in receiver.snapshot()] == ["/audit"]
    with psycopg.connect(empty_dsn) as conn:
        rows = dict(conn.execute(
            "SELECT p.name, (d.state, d.last_error) FROM outbox.deliveries d "
            "JOIN outbox.endpoints p ON p.id = d.endpoint_id").fetchall())
    assert rows["audit"][0] == "delivered"
    assert rows["acme"] == ("dead", "not sent: endpoint acme belongs to tenant 'acme', "
                                    "and this is an event without a tenant")
