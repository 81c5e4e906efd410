"""outbox-dispatcher --databases: fifty databases in one cluster, served by a fleet of two or
three dispatchers within their connection budget, through a kill, a database added and one
removed, and beside databases that are unreachable, on an old schema or without one."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from dispatcher.many import ownership
from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support.cli import clean_environment, run_outbox
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, wait_until
from tests.support.pgbouncer import PgBouncer, find_pgbouncer
from tests.support.roles import login_role, role_dsn

COUNT = 50
BUDGET = 20
ARGS = ("--max-connections", str(BUDGET), "--sweep-interval", "30")
_APP = "outbox-dispatcher%"


class Fleet:
    """The module's databases: their names in the file, DSNs, and what each received."""

    def __init__(self, cluster: Cluster, names: dict[str, str]) -> None:
        self.cluster = cluster
        self.dbnames = names  # file name -> database name
        self.dsns = {name: cluster.dsn_for(db) for name, db in names.items()}

    def file(self, path: Path, names: list[str], *, extra: str = "",
             refresh: str = "60s", pooler: PgBouncer | None = None) -> Path:
        """The databases file; with ``pooler``, each dsn goes through it and each
        listen_dsn is direct."""
        lines = [f'refresh = "{refresh}"', ""]
        for name in names:
            dsn = self.dsns[name]
            lines += ["[[database]]", f'name = "{name}"',
                      f"dsn = {pooler.dsn_for(dsn) if pooler else dsn!r}"]
            lines += [f"listen_dsn = {dsn!r}", ""] if pooler else [""]
        path.write_text("\n".join(lines) + extra, encoding="utf-8")
        return path

    def publish(self, names: list[str], per_database: int = 1) -> set[str]:
        """Events published into each database, committed; their ids."""
        ids: set[str] = set()
        for name in names:
            with psycopg.connect(self.dsns[name]) as conn:
                for _ in range(per_database):
                    ids.add(str(publish(conn, "fleet.test", {"db": name})))
        return ids

    def connections(self) -> int:
        """The dispatchers' connections to the server, as pg_stat_activity lists them."""
        with self.cluster.admin() as admin:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity "
                                "WHERE application_name LIKE %s", (_APP,)).fetchone()
        assert row is not None
        return int(row[0])


BAD = "postgresql://fleet:sekret-word@127.0.0.1:1/nowhere?connect_timeout=2"
"""An unreachable database, with a password that must never be printed."""


@pytest.fixture(scope="module")
def fleet(cluster: Cluster, template_db: str, receiver_module: Receiver) -> Iterator[Fleet]:
    prefix = f"fleet_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    names = {f"db{i:02d}": f"{prefix}_{i:02d}" for i in range(COUNT + 2)}
    names |= {"old": f"{prefix}_old", "bare": f"{prefix}_bare"}
    with cluster.admin() as admin:
        for name, db in names.items():
            template = sql.SQL(" TEMPLATE {}").format(sql.Identifier(template_db)) \
                if name != "bare" else sql.SQL("")
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)) + template)
    made = Fleet(cluster, names)
    try:
        for name in names:
            if name == "bare":
                continue
            with psycopg.connect(made.dsns[name]) as conn:
                add_endpoint(conn, "hook", receiver_module.url + name)
                if name == "old":
                    conn.execute("DELETE FROM outbox.schema_version WHERE version > 10")
                    conn.commit()
        yield made
    finally:
        with cluster.admin() as admin:
            for db in names.values():
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(db)))


@pytest.fixture(scope="module")
def receiver_module() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


def _received(receiver: Receiver, ids: set[str]) -> set[str]:
    return {r.header("webhook-id") or "" for r in list(receiver.requests)} & ids


def _many(path: Path, *args: str) -> Dispatcher:
    return Dispatcher(None, "--databases", str(path), *ARGS, *args).start()


def _stop(*dispatchers: Dispatcher) -> None:
    for d in dispatchers:
        if d.process is not None and d.process.poll() is None:
            d.stop()


_PROCESS_WIDE = ("outbox_build_info", "outbox_event_loop_lag_seconds")
"""The process's own series (its build, its event loop), beyond the documented ones."""


def _series(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if line.startswith("outbox_") and not line.startswith(_PROCESS_WIDE)]


def _up(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^outbox_database_up\{database="([^"]+)"\} (\S+)$', text, re.M)}


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dispatcher", *args], capture_output=True,
                          text=True, env=clean_environment(), timeout=60, check=False)


@pytest.mark.parametrize(("content", "words"), [
    ('[[database]]\nname = "a"\ndsn = "dbname=a"\n[[database]]\nname = "a"\ndsn = "dbname=b"\n',
     "given twice"),
    ('refresh = "60s"\n', "lists no database"),
    ('[[database]]\nname = "a"\ndsn = "dbname=a"\ncolour = "red"\n', "unknown key"),
    ('[[database]]\nname = "a"\ndsn = "env:FLEET_TEST_UNSET_DSN"\n', "is not set"),
])
def test_a_bad_databases_file_exits_two_and_starts_nothing(tmp_path: Path, content: str,
                                                           words: str) -> None:
    """A bad databases file exits 2 with one line naming what is wrong, and starts nothing."""
    path = tmp_path / "databases.toml"
    path.write_text(content, encoding="utf-8")
    done = _command("--databases", str(path), "--metrics-port", "0")
    assert done.returncode == 2, done.stderr
    assert words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_dsn_with_databases_and_a_bad_catalog_query_exit_two(tmp_path: Path,
                                                             cluster: Cluster) -> None:
    """--dsn with --databases, or a catalog query that does not parse, exits 2 in one line."""
    path = tmp_path / "databases.toml"
    path.write_text(f'[catalog]\ndsn = {cluster.admin_dsn!r}\nquery = "SELEC name, dsn"\n',
                    encoding="utf-8")
    for args in (["--dsn", "dbname=x", "--databases", str(path)], ["--databases", str(path)]):
        done = _command(*args)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "does not parse" in done.stderr


def test_two_dispatchers_share_fifty_databases_within_their_budget(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path) -> None:
    """Two dispatchers share fifty databases within budget, set the bad ones aside, label all."""
    names = [f"db{i:02d}" for i in range(COUNT)]
    path = fleet.file(tmp_path / "databases.toml", [*names, "old", "bare"],
                      extra=f'[[database]]\nname = "unreachable"\ndsn = "{BAD}"\n')
    first, second = _many(path), _many(path)
    try:
        first.wait_serving(timeout=60)
        second.wait_serving(timeout=60)
        ids = fleet.publish(names, per_database=2)
        most = 0

        def all_received() -> bool:
            nonlocal most
            most = max(most, fleet.connections())
            return _received(receiver_module, ids) == ids
        wait_until(all_received, timeout=90, interval=0.2, dispatcher=first,
                   what=f"{len(ids)} events from {COUNT} databases")
        assert most <= 2 * BUDGET, most
        texts = [first.get("/metrics").text, second.get("/metrics").text]
        ups = [_up(text) for text in texts]
        served = [name for up in ups for name, value in up.items() if value == 1.0]
        assert sorted(served) == sorted(names)  # each served by exactly one of them
        for aside in ("unreachable", "old", "bare"):
            assert [up[aside] for up in ups if aside in up] == [0.0], aside
        for text in texts:
            assert all('database="' in line for line in _series(text)), text
            assert "outbox_delivered_total{" in text
        logs = first.log() + second.log()
        assert "sekret-word" not in logs
        for aside in ("unreachable", "old", "bare"):
            assert logs.count(f"database {aside} is set aside") == 1, logs
        assert first.get("/readyz").status_code == 200
    finally:
        _stop(first, second)


def test_a_killed_dispatchers_databases_are_served_by_the_others(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path) -> None:
    """One of three dispatchers killed, the other two serve its databases; nothing is lost."""
    names = [f"db{i:02d}" for i in range(COUNT)]
    path = fleet.file(tmp_path / "databases.toml", names)
    dispatchers = [_many(path) for _ in range(3)]
    try:
        for d in dispatchers:
            d.wait_serving(timeout=60)
        wait_until(lambda: all("the fleet has 3 members" in d.log() for d in dispatchers),
                   timeout=30, what="three members", dispatcher=dispatchers[0])
        before = fleet.publish(names)
        wait_until(lambda: _received(receiver_module, before) == before, timeout=90,
                   interval=0.2, dispatcher=dispatchers[0], what="events before the kill")
        victim = dispatchers.pop()
        assert victim.process is not None
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(10)
        after = fleet.publish(names)
        wait_until(lambda: _received(receiver_module, after) == after, timeout=90,
                   interval=0.2, dispatcher=dispatchers[0], what="events after the kill")
        served = [name for d in dispatchers for name, v in _up(d.get("/metrics").text).items()
                  if v == 1.0]
        assert sorted(served) == sorted(names)
    finally:
        _stop(*dispatchers)


def test_a_database_added_is_served_and_one_removed_is_let_go(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path) -> None:
    """A database added to the file is served within one refresh; one removed is let go."""
    path = fleet.file(tmp_path / "databases.toml", ["db00", "db01"], refresh="1s")
    dispatcher = _many(path)
    try:
        dispatcher.wait_serving(timeout=60)
        fleet.file(path, ["db01", f"db{COUNT:02d}"], refresh="1s")
        wait_until(lambda: "database db00 is let go" in dispatcher.log(), timeout=30,
                   dispatcher=dispatcher, what="db00 to be let go")
        added = fleet.publish([f"db{COUNT:02d}"])
        wait_until(lambda: _received(receiver_module, added) == added, timeout=30,
                   dispatcher=dispatcher, what="the added database's event")
        up = _up(dispatcher.get("/metrics").text)
        assert "db00" not in up
        assert up[f"db{COUNT:02d}"] == 1.0
    finally:
        _stop(dispatcher)


def test_a_lone_dsn_labels_no_series_with_a_database(dsn: str, receiver: Receiver,
                                                     conn: psycopg.Connection[Any]) -> None:
    """With a lone --dsn, no metric series carries a database label."""
    add_endpoint(conn, "hook", receiver.url)
    event = str(publish(conn, "fleet.test", {}))
    with Dispatcher(dsn) as dispatcher:
        wait_until(lambda: _received(receiver, {event}), dispatcher=dispatcher,
                   what="the event")
        text = dispatcher.get("/metrics").text
    assert "outbox_delivered_total{" in text
    assert not any("database=" in line for line in _series(text))
    assert "outbox_database_up" not in text


def test_fleet_histograms_come_once_per_database(fleet: Fleet, receiver_module: Receiver,
                                                 tmp_path: Path) -> None:
    """--databases with --histograms fleet: each database served has one lag and one duration
    histogram, labelled with its name and no endpoint."""
    path = fleet.file(tmp_path / "databases.toml", ["db02", "db03"])
    dispatcher = _many(path, "--histograms", "fleet")
    try:
        dispatcher.wait_serving(timeout=60)
        sent = fleet.publish(["db02", "db03"])
        wait_until(lambda: _received(receiver_module, sent) == sent, timeout=30,
                   dispatcher=dispatcher, what="an event of each database")
        text = dispatcher.get("/metrics").text
    finally:
        _stop(dispatcher)
    histograms = [line for line in _series(text)
                  if line.startswith(("outbox_delivery_lag_seconds",
                                      "outbox_delivery_duration_seconds"))]
    assert not [line for line in histograms if "endpoint=" in line]
    for name in ("db02", "db03"):
        (count,) = [line for line in histograms
                    if line.startswith(f'outbox_delivery_lag_seconds_count{{database="{name}"}}')]
        assert float(count.split()[-1]) >= 1


def test_a_catalog_down_at_start_is_tried_again_and_the_files_databases_served(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path) -> None:
    """A catalog down at start is retried while the file's databases (OUTBOX_DATABASES) run."""
    path = fleet.file(tmp_path / "databases.toml", ["db01"],
                      extra=f'[catalog]\ndsn = "{BAD}"\nquery = "SELECT name, dsn FROM t"\n')
    dispatcher = Dispatcher(None, *ARGS, env={"OUTBOX_DATABASES": str(path),
                                              "OUTBOX_DSN": BAD, "DATABASE_URL": BAD}).start()
    try:
        dispatcher.wait_serving(timeout=60)
        event = fleet.publish(["db01"])
        wait_until(lambda: _received(receiver_module, event) == event, timeout=30,
                   dispatcher=dispatcher, what="the file's database's event")
        log = dispatcher.log()
        assert "the catalog database is unreachable" in log
        assert "sekret-word" not in log
    finally:
        _stop(dispatcher)


def test_a_trickle_is_not_held_behind_a_busy_databases_backlog(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path) -> None:
    """A database's few events arrive while another database's backlog still drains."""
    path = fleet.file(tmp_path / "databases.toml", ["db02", "db03"])
    with psycopg.connect(fleet.dsns["db02"]) as conn:
        for start in range(0, 20_000, 1000):
            outbox.publish_many(conn, [outbox.Event("fleet.backlog", {"n": n})
                                       for n in range(start, start + 1000)])
            conn.commit()
    dispatcher = _many(path)
    try:
        wait_until(lambda: len(receiver_module.requests) > 100, timeout=60,
                   dispatcher=dispatcher, what="the backlog to flow")
        trickle = fleet.publish(["db03"], per_database=3)
        wait_until(lambda: _received(receiver_module, trickle) == trickle, timeout=60,
                   dispatcher=dispatcher, what="the trickle")
        with psycopg.connect(fleet.dsns["db02"]) as conn:
            row = conn.execute("SELECT count(*) FROM outbox.deliveries "
                               "WHERE state = 'pending'").fetchone()
        assert row is not None
        assert row[0] > 0  # the backlog was still draining when the trickle arrived
    finally:
        _stop(dispatcher)
        with psycopg.connect(fleet.dsns["db02"]) as conn:
            conn.execute("DELETE FROM outbox.deliveries WHERE state <> 'delivered'")
        receiver_module.requests.clear()  # 20,000 requests would slow every later look


@pytest.mark.skipif(find_pgbouncer() is None, reason="pgbouncer is not installed")
def test_databases_behind_a_transaction_pooler_are_served(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path, cluster: Cluster) -> None:
    """Databases reached through PgBouncer in transaction mode (LISTEN direct) are served."""
    names = [f"db{i:02d}" for i in range(4, 12)]
    with PgBouncer(cluster.admin_dsn, pool_size=4) as bouncer:
        path = fleet.file(tmp_path / "databases.toml", names, pooler=bouncer)
        dispatcher = _many(path)
        try:
            dispatcher.wait_serving(timeout=60)
            ids = fleet.publish(names)
            wait_until(lambda: _received(receiver_module, ids) == ids, timeout=60,
                       dispatcher=dispatcher, what="events through the pooler")
            log = dispatcher.log()
            assert "goes through a transaction pooler" in log
            assert "Traceback" not in log
        finally:
            _stop(dispatcher)


def test_a_frozen_dispatchers_databases_move_once_its_beat_is_older_than_the_lease(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path) -> None:
    """A frozen dispatcher (SIGSTOP) keeps its session, yet its databases move after --lease."""
    names = [f"db{i:02d}" for i in range(20, 30)]
    path = fleet.file(tmp_path / "databases.toml", names)
    frozen, alive = _many(path), _many(path)
    try:
        for d in (frozen, alive):
            d.wait_serving(timeout=60)
        wait_until(lambda: "the fleet has 2 members" in alive.log(), timeout=30,
                   dispatcher=alive, what="two members")
        assert frozen.process is not None
        alone = alive.log().count("the fleet has 1 member")
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: alive.log().count("the fleet has 1 member") > alone, timeout=30,
                       dispatcher=alive, what="the frozen member to be dropped")
            ids = fleet.publish(names)
            wait_until(lambda: _received(receiver_module, ids) == ids, timeout=60,
                       interval=0.2, dispatcher=alive, what="events while one is frozen")
        finally:
            frozen.process.send_signal(signal.SIGCONT)
    finally:
        _stop(frozen, alive)


def test_a_database_that_stops_answering_is_set_aside_and_served_again(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path) -> None:
    """A database gone at run time is set aside (up 0) while another is served, then back."""
    path = fleet.file(tmp_path / "databases.toml", ["db30", "db31"])
    dispatcher = _many(path)
    target = sql.Identifier(fleet.dbnames["db30"])
    try:
        dispatcher.wait_serving(timeout=60)
        first = fleet.publish(["db30"])
        wait_until(lambda: _received(receiver_module, first) == first, timeout=30,
                   dispatcher=dispatcher, what="db30's first event")
        with fleet.cluster.admin() as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(target))
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s", (fleet.dbnames["db30"],))
        wait_until(lambda: "database db30 is set aside" in dispatcher.log(), timeout=60,
                   dispatcher=dispatcher, what="db30 to be set aside")
        assert _up(dispatcher.get("/metrics").text) == {"db30": 0.0, "db31": 1.0}
        other = fleet.publish(["db31"])
        wait_until(lambda: _received(receiver_module, other) == other, timeout=30,
                   dispatcher=dispatcher, what="db31's event while db30 is away")
        assert dispatcher.get("/readyz").status_code == 200
    finally:
        with fleet.cluster.admin() as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(target))
    try:
        wait_until(lambda: "database db30 answers again" in dispatcher.log(), timeout=90,
                   dispatcher=dispatcher, what="db30 to be served again")
        back = fleet.publish(["db30"])
        wait_until(lambda: _received(receiver_module, back) == back, timeout=30,
                   dispatcher=dispatcher, what="db30's event once back")
    finally:
        _stop(dispatcher)


def _beats(fleet: Fleet, home: str) -> dict[str, tuple[str, int]]:
    """The members' sessions in the home database: id -> (fleet, beat), as anyone reads them."""
    with psycopg.connect(fleet.dsns[home], autocommit=True) as conn:
        rows = conn.execute("SELECT application_name FROM pg_stat_activity "
                            "WHERE datname = current_database() "
                            "AND application_name LIKE 'outbox-dispatcher member %'").fetchall()
    found = {}
    for (name,) in rows:
        _, _, fleet_name, member, beat = name.split(" ")
        found[member] = (fleet_name, int(beat))
    return found


def test_a_session_of_another_role_posing_as_a_member_moves_no_database(
        fleet: Fleet, receiver_module: Receiver, tmp_path: Path, cluster: Cluster) -> None:
    """A role with no grants copies a member's application_name, with an id that wins every
    database and a beat from the future: the real dispatchers go on serving every one."""
    names = [f"db{i:02d}" for i in range(40, 46)]
    path = fleet.file(tmp_path / "databases.toml", names)
    dispatchers = [_many(path), _many(path)]
    try:
        for d in dispatchers:
            d.wait_serving(timeout=60)
        wait_until(lambda: len(_beats(fleet, names[0])) == 2, timeout=30,
                   dispatcher=dispatchers[0], what="two members")
        real = _beats(fleet, names[0])
        fleet_name = next(iter(real.values()))[0]
        # Each candidate wins all six with odds of 1 in (members + 1) ** 6: 729 to one with
        # two members, 46,656 to one if sessions of an earlier test's fleet linger beside them.
        forged = next(candidate for candidate in (uuid.uuid4().hex[:12]
                                                  for _ in range(5_000_000))
                      if all(ownership.owner(name, {candidate, *real}) == candidate
                             for name in names))
        with login_role(cluster) as stranger, \
                psycopg.connect(role_dsn(fleet.dsns[names[0]], stranger),
                                autocommit=True) as poser:
            row = poser.execute(
                "SELECT set_config('application_name', %s || (extract(epoch FROM now())::bigint "
                "+ 3600)::text, false), extract(epoch FROM now())::bigint",
                (f"outbox-dispatcher member {fleet_name} {forged} ",)).fetchone()
            assert row is not None
            posed = int(row[1]) + 1  # a beat past this one was read after the poser's name
            wait_until(lambda: all(_beats(fleet, names[0])[member][1] > posed
                                   for member in real), timeout=30,
                       dispatcher=dispatchers[0], what="both members to beat past the poser")
            ids = fleet.publish(names)
            wait_until(lambda: _received(receiver_module, ids) == ids, timeout=60,
                       interval=0.2, dispatcher=dispatchers[0],
                       what="every database's event beside the poser")
            texts = [d.get("/metrics").text for d in dispatchers]
        served = [name for text in texts for name, v in _up(text).items() if v == 1.0]
        assert sorted(served) == names
        for text in texts:  # each lists them all, for the alert on a database none serves
            assert re.findall(r'^outbox_database_listed\{database="([^"]+)"\} 1', text,
                              re.M) == names
        logs = "".join(d.log() for d in dispatchers)
        assert "the fleet has 3 members" not in logs
    finally:
        _stop(*dispatchers)


def _gauge(text: str, name: str, database: str) -> float | None:
    found = re.search(rf'^{name}\{{database="{database}",endpoint="hook"\}} (\S+)$', text, re.M)
    return None if found is None else float(found.group(1))


def test_an_idle_database_is_watched_by_the_dispatcher_serving_it(
        fleet: Fleet, tmp_path: Path) -> None:
    """A database nothing pins: its gauges show an endpoint disabled and an event waiting
    within a sweep, and `outbox status` names the dispatcher serving it."""
    path = fleet.file(tmp_path / "databases.toml", ["db46", "db47"])
    dispatcher = _many(path, "--sweep-interval", "5")
    dsn = fleet.dsns["db46"]
    try:
        dispatcher.wait_serving(timeout=60)

        def gauge(name: str) -> float | None:
            return _gauge(dispatcher.get("/metrics").text, name, "db46")
        wait_until(lambda: gauge("outbox_endpoint_enabled") == 1.0, timeout=15,
                   dispatcher=dispatcher, what="db46's gauges while idle")
        assert gauge("outbox_pending") == 0.0
        with psycopg.connect(dsn, autocommit=True) as conn:  # no insert: no hint, a sweep
            conn.execute("UPDATE outbox.endpoints SET enabled = false, "
                         "disabled_reason = 'by hand' WHERE name = 'hook'")
        wait_until(lambda: gauge("outbox_endpoint_enabled") == 0.0, timeout=5 + 5,
                   dispatcher=dispatcher, what="the endpoint disabled, on /metrics")
        fleet.publish(["db46"])
        wait_until(lambda: gauge("outbox_pending") == 1.0, timeout=5 + 5,
                   dispatcher=dispatcher, what="the waiting event, on /metrics")
        assert gauge("outbox_oldest_pending_seconds") is not None
        assert gauge("outbox_circuit_open") == 0.0
        shown = _status(path, "db46")
        assert dispatcher.process is not None
        # (an earlier test's dispatcher, stopped, may still be named until its row lapses)
        assert {"host": socket.gethostname(), "pid": dispatcher.process.pid} in shown[
            "served_by"]
        text = _status_text(path, "db46")
        assert f"{socket.gethostname()} (pid {dispatcher.process.pid})" in text
        assert "served by: " in text
        assert "nothing is delivered" not in text
    finally:
        _stop(dispatcher)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM outbox.deliveries")
            conn.execute("UPDATE outbox.endpoints SET enabled = true, disabled_reason = NULL")


def _status(path: Path, name: str) -> Any:
    done = run_outbox(None, "status", "--databases", str(path), "--db", name, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _status_text(path: Path, name: str) -> str:
    done = run_outbox(None, "status", "--databases", str(path), "--db", name)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_database_let_go_withdraws_its_series_at_once(
        fleet: Fleet, tmp_path: Path) -> None:
    """A database removed from the file: the dispatcher that served it exports no series of
    it from that moment, its counters and gauges included."""
    path = fleet.file(tmp_path / "databases.toml", ["db48", "db49"], refresh="1s")
    dispatcher = _many(path, "--sweep-interval", "5")
    try:
        dispatcher.wait_serving(timeout=60)
        wait_until(lambda: _gauge(dispatcher.get("/metrics").text, "outbox_pending", "db48")
                   is not None, timeout=15, dispatcher=dispatcher, what="db48's gauges")
        fleet.file(path, ["db49"], refresh="1s")
        wait_until(lambda: "database db48 is let go" in dispatcher.log(), timeout=30,
                   dispatcher=dispatcher, what="db48 to be let go")
        text = dispatcher.get("/metrics").text
        assert 'database="db48"' not in text
        assert _gauge(text, "outbox_pending", "db49") is not None
    finally:
        _stop(dispatcher)
