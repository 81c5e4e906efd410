"""deploy/prometheus over a fleet: twenty databases, two dispatchers with their default
options, and a real Prometheus (the rules' ``for:`` shortened, tests/support/prometheus.py).
A database nothing is delivered to (its endpoint disabled, an event waiting) fires
``OutboxEndpointDisabled`` as a busy one would: its dispatcher watches it without pinning
connections to it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import Cluster
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, wait_until
from tests.support.prometheus import Prometheus, binary

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(binary() is None,
                                 reason="prometheus is not installed (Debian: prometheus)")]

COUNT = 20
IDLE = "db07"


@pytest.fixture
def databases(cluster: Cluster, template_db: str) -> Iterator[dict[str, str]]:
    """Twenty migrated databases with an endpoint each: file name -> DSN."""
    prefix = f"alerts_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    names = {f"db{n:02d}": f"{prefix}_{n:02d}" for n in range(COUNT)}
    with cluster.admin() as admin:
        for db in names.values():
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(db), sql.Identifier(template_db)))
    dsns = {name: cluster.dsn_for(db) for name, db in names.items()}
    try:
        for dsn in dsns.values():
            with psycopg.connect(dsn) as conn:
                add_endpoint(conn, "hook", "http://127.0.0.1:9/hook")
        yield dsns
    finally:
        with cluster.admin() as admin:
            for db in names.values():
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(db)))


@pytest.mark.timeout(240)
def test_an_idle_databases_disabled_endpoint_fires_within_90_seconds(
        databases: dict[str, str], tmp_path: Path, cluster: Cluster) -> None:
    """Twenty databases, two dispatchers: an endpoint disabled in an idle database, an
    event waiting there, fires OutboxEndpointDisabled for that database within 90 s, and
    for no other; the database held no pinned connection meanwhile."""
    path = tmp_path / "databases.toml"
    path.write_text("".join(f'[[database]]\nname = "{name}"\ndsn = {dsn!r}\n\n'
                            for name, dsn in databases.items()), encoding="utf-8")
    fleet = [Dispatcher(None, "--databases", str(path)).start() for _ in range(2)]
    try:
        for dispatcher in fleet:
            dispatcher.wait_serving(timeout=60)
        wait_until(lambda: all("the fleet has 2 members" in d.log() for d in fleet),
                   timeout=30, dispatcher=fleet[0], what="two members")
        with Prometheus([f"127.0.0.1:{d.port}" for d in fleet]) as prom:
            with psycopg.connect(databases[IDLE]) as conn:
                conn.execute("UPDATE outbox.endpoints SET enabled = false, "
                             "disabled_reason = 'by hand' WHERE name = 'hook'")
                conn.commit()
                publish(conn, "order.created", {"n": 1})
            changed = prom.api("query", query="time()")["result"][1]

            def firing() -> list[dict[str, str]] | None:
                found = [a["labels"] for a in prom.api("alerts")["alerts"]
                         if a["labels"]["alertname"] == "OutboxEndpointDisabled"
                         and a["state"] == "firing"]
                return found or None
            fired = wait_until(firing, timeout=90, interval=0.5, dispatcher=fleet[0],
                               what=f"OutboxEndpointDisabled to fire\n{prom.log()}")
            took = float(prom.api("query", query="time()")["result"][1]) - float(changed)
            assert [(a["database"], a["endpoint"]) for a in fired] == [(IDLE, "hook")]
            assert took <= 90, took
            exported = prom.api("query", query=f'outbox_pending{{database="{IDLE}"}}')
            assert [float(r["value"][1]) for r in exported["result"]] == [1.0]
        idle_db = psycopg.conninfo.conninfo_to_dict(databases[IDLE])["dbname"]
        with cluster.admin() as admin:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                "AND application_name LIKE 'outbox-dispatcher claim%%'",
                                (idle_db,)).fetchone()
        assert row == (0,)  # watched, never pinned
    finally:
        for dispatcher in fleet:
            if dispatcher.process is not None and dispatcher.process.poll() is None:
                dispatcher.stop()
