"""The web view over a databases file: /databases, ?db=NAME on every page, bounded pools."""

from __future__ import annotations

import os
import re
import socket
import warnings
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox._shared.databases import Database
from outbox.web.db import NoConnection
from outbox.web.sites import CONNECTIONS, MOST_OPEN, Sites, UnknownDatabase
from tests.conftest import Cluster
from tests.support.dispatcher import wait_until
from tests.support.web import dead_scene, web_client

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient


@pytest.fixture
def second(cluster: Cluster, template_db: str) -> Iterator[str]:
    """Another migrated database, beside the test's own."""
    name = f"web_b_{os.getpid()}"
    with cluster.admin() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template_db)))
    try:
        yield cluster.dsn_for(name)
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


@pytest.fixture
def client(dsn: str, second: str, conn: psycopg.Connection[Any]) -> Iterator[TestClient]:
    dead_scene(conn)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    databases = (Database("alpha", dsn), Database("beta", second),
                 Database("gone", f"postgresql://u:pw-never-shown@127.0.0.1:{closed}/x"))
    with web_client("", databases=databases, allow_actions=True) as web:
        yield web


def test_root_redirects_to_the_overview_of_every_database(client: TestClient) -> None:
    """Without ?db=, / redirects to /databases, which lists each database as status --all."""
    root = client.get("/")
    assert root.status_code == 303
    assert root.headers["location"] == "/databases"
    shown = client.get("/databases?format=json").json()["databases"]
    assert [r["database"] for r in shown] == ["alpha", "beta", "gone"]
    assert shown[0] == {"database": "alpha", "state": "ok", "pending": 1, "dead": 1,
                        "oldest_pending_seconds": shown[0]["oldest_pending_seconds"],
                        "reason": None}
    assert shown[2]["state"] == "unreachable"
    page = client.get("/databases")
    assert page.status_code == 200
    assert 'href="/?db=alpha"' in page.text
    assert "pw-never-shown" not in page.text + client.get("/databases?format=json").text


def test_every_page_of_one_database_keeps_its_db(client: TestClient,
                                                 conn: psycopg.Connection[Any]) -> None:
    """?db=NAME picks the database; each link and form of its pages keeps it."""
    endpoints = client.get("/?db=alpha&format=json").json()["endpoints"]
    assert {e["name"] for e in endpoints} == {"billing", "mail"}
    assert client.get("/?db=beta&format=json").json()["endpoints"] == []
    for address in ("/?db=alpha", "/dead?db=alpha", "/search?db=alpha&q=customer-7"):
        page = client.get(address)
        assert page.status_code == 200, address
        links = re.findall(r'(?:href|action)="(/[^"]*)"', page.text)
        assert links, address
        for link in links:
            if link.startswith(("/static/", "/databases")) or link in ("/dead", "/search"):
                continue
            assert "db=alpha" in link, (address, link)
        assert 'name="db" value="alpha"' in page.text  # the search form (and filters) keep it
    dead = client.get("/dead?db=alpha&format=json").json()
    event = dead[0]["event_id"]
    story = client.get(f"/events/{event}?db=alpha")
    assert story.status_code == 200
    assert f'action="/events/{event}/retry?db=alpha"' in story.text
    assert client.get(f"/events/{event}?db=beta").status_code == 404


def test_a_missing_or_unknown_db_is_refused(client: TestClient) -> None:
    """A page of one database without ?db= is a 400 naming them; an unknown one a 404."""
    missing = client.get("/dead?format=json")
    assert missing.status_code == 400
    assert "alpha, beta, gone" in missing.json()["error"]
    unknown = client.get("/dead?db=nope")
    assert unknown.status_code == 404
    assert "alpha, beta, gone" in unknown.text


def test_a_page_of_an_unreachable_database_says_why(client: TestClient) -> None:
    """?db= of a database that cannot be reached is a 503 saying so and why, not that every
    connection was busy; no password shown."""
    page = client.get("/?db=gone&format=json")
    assert page.status_code == 503
    error = page.json()["error"]
    assert error.startswith("cannot reach the database: "), error
    assert "busy" not in error
    assert "pw-never-shown" not in error


def test_open_databases_are_bounded_however_recent_and_busy_ones_stay() -> None:
    """Past the most kept open, the database used longest ago that nothing reads is closed,
    however recently it was read; with every open one being read, the view is busy."""
    closed: list[str] = []

    class Part:
        def __init__(self, name: str) -> None:
            self.name, self.writer, self.lent = name, None, False
            self.readers, self.counts, self.running = self, self, False

        def busy(self) -> bool:
            return self.lent

        def close(self) -> None:
            closed.append(self.name)

    made: list[str] = []

    def build(database: Database) -> Any:
        made.append(database.name)
        return Part(database.name)

    listed = tuple(Database(n, "host=x") for n in ("a", "b", "c"))
    sites = Sites(listed, build, most_open=2)
    a = sites.hold("a")
    sites.release(a)
    b = sites.hold("b")
    sites.release(b)
    sites.release(sites.hold("a"))
    c = sites.hold("c")  # b, used longest ago, is closed at once
    assert closed == ["b"]
    a = sites.hold("a")
    with pytest.raises(NoConnection, match="the view is busy"):
        sites.hold("b")  # a and c are held
    sites.release(a)
    a.lent = True  # a connection of a's is still lent (its counts, behind a page)
    with pytest.raises(NoConnection):
        sites.hold("b")
    a.lent = False
    sites.release(sites.hold("b"))
    assert closed == ["b", "a"]
    assert made == ["a", "b", "c", "b"]
    with pytest.raises(UnknownDatabase):
        sites.hold("d")
    sites.release(c)
    sites.close()
    assert sorted(closed) == ["a", "b", "b", "c"]


def test_a_database_that_leaves_the_list_is_closed_once_no_page_holds_it() -> None:
    """The list read again: a database removed, or whose entry changed, is closed at once
    when nothing holds it, else when its last page is done; one added is opened on use."""
    closed: list[str] = []

    class Part:
        def __init__(self, name: str) -> None:
            self.name, self.writer, self.readers, self.counts = name, None, self, self
            self.running = False

        def busy(self) -> bool:
            return False

        def close(self) -> None:
            closed.append(self.name)

    sites = Sites(tuple(Database(n, "host=x") for n in ("a", "b", "c")),
                  lambda database: Part(f"{database.name} {database.dsn}"))
    sites.release(sites.hold("a"))
    held = sites.hold("b")
    sites.release(sites.hold("c"))
    sites.replace((Database("c", "host=y"), Database("d", "host=x")), ())
    assert sorted(closed) == ["a host=x", "c host=x"]
    sites.release(held)
    assert sorted(closed) == ["a host=x", "b host=x", "c host=x"]
    with pytest.raises(UnknownDatabase):
        sites.hold("a")
    assert sites.hold("c").name == "c host=y"  # type: ignore[attr-defined]
    sites.hold("d")
    assert [d.name for d in sites.databases] == ["c", "d"]


@pytest.fixture
def walk(cluster: Cluster, template_db: str) -> Iterator[tuple[Database, ...]]:
    """More migrated databases than the view keeps open, listed as db0, db1, ..."""
    names = [f"web_walk_{os.getpid()}_{n}" for n in range(MOST_OPEN + 3)]
    with cluster.admin() as admin:
        for name in names:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)))
    try:
        yield tuple(Database(f"db{n}", cluster.dsn_for(name)) for n, name in enumerate(names))
    finally:
        with cluster.admin() as admin:
            for name in names:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)))


def _held(cluster: Cluster, databases: tuple[Database, ...]) -> dict[str, int]:
    """The view's connections the server lists, by database (the walk's databases only)."""
    names = [psycopg.conninfo.conninfo_to_dict(d.dsn)["dbname"] for d in databases]
    with cluster.admin() as admin:
        rows = admin.execute("SELECT datname, count(*) FROM pg_stat_activity "
                             "WHERE application_name = 'outbox-web' AND datname = ANY(%s) "
                             "GROUP BY datname", (names,)).fetchall()
    return {str(name): int(count) for name, count in rows}


def test_a_walk_over_every_database_holds_connections_to_at_most_the_cap(
        cluster: Cluster, walk: tuple[Database, ...]) -> None:
    """A client walking ?db= over more databases than the view keeps open finds the server
    holding the view's connections to at most MOST_OPEN of them, however recent the pages."""
    most = MOST_OPEN * (CONNECTIONS + 1)  # readers, and the writer of --allow-actions
    with web_client("", databases=walk, allow_actions=True) as web:
        for database in walk:
            for address in ("/", "/dead"):
                assert web.get(f"{address}?db={database.name}").status_code == 200, address

            def within() -> bool:  # a backend leaves the list a moment after its close
                held = _held(cluster, walk)
                return len(held) <= MOST_OPEN and sum(held.values()) <= most
            wait_until(within, timeout=5, what=f"at most {MOST_OPEN} databases held")
        assert _held(cluster, walk)  # the last pages' connections stay for the next ones


def test_a_view_whose_open_databases_are_all_being_read_answers_503(
        walk: tuple[Database, ...]) -> None:
    """With every database it keeps open being read (held by a page, or a connection lent),
    a page of another is a 503 saying the view is busy; once one is done, it is served."""
    with web_client("", databases=walk) as web:
        sites: Sites = web.app.state.sites  # type: ignore[attr-defined]
        reading = [sites.hold(database.name) for database in walk[:MOST_OPEN]]
        busy = web.get(f"/dead?db={walk[MOST_OPEN].name}")
        assert busy.status_code == 503
        assert "the view is busy" in busy.text
        sites.release(reading[0])
        with reading[0].readers.connection():  # still lent (counts behind a page, say)
            assert web.get(f"/dead?db={walk[MOST_OPEN].name}").status_code == 503
        assert web.get(f"/dead?db={walk[MOST_OPEN].name}").status_code == 200
        for part in reading[1:]:
            sites.release(part)
