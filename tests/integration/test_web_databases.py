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
from outbox.web import sites as sites_module
from outbox.web.sites import Sites, UnknownDatabase
from tests.conftest import Cluster
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


def test_open_databases_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the most kept open, the database used longest ago is closed, and opened again."""
    monkeypatch.setattr(sites_module, "GRACE_SECONDS", 0.0)
    closed: list[str] = []

    class Part:
        def __init__(self, name: str) -> None:
            self.name, self.writer = name, None
            self.readers = self

        def close(self) -> None:
            closed.append(self.name)

    made: list[str] = []

    def build(database: Database) -> Any:
        made.append(database.name)
        return Part(database.name)

    listed = tuple(Database(n, "host=x") for n in ("a", "b", "c"))
    sites = Sites(listed, build, most_open=2)
    sites.get("a")
    sites.get("b")
    sites.get("a")
    sites.get("c")
    assert closed == ["b"]
    sites.get("b")
    assert made == ["a", "b", "c", "b"]
    with pytest.raises(UnknownDatabase):
        sites.get("d")
    sites.close()
    assert sorted(closed) == ["a", "b", "b", "c"]
