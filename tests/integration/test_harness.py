"""The harness itself: a fresh migrated database per test, and a working receiver."""

from __future__ import annotations

import os
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from outbox.testing import Receiver, Response
from tests.conftest import Cluster
from tests.support.roles import create_role, role_dsn


def test_fresh_database_is_migrated_and_empty(conn: psycopg.Connection[Any]) -> None:
    """Each test starts from an empty, migrated outbox schema."""
    row = conn.execute("SELECT count(*) FROM outbox.events").fetchone()
    assert row == (0,)


def test_receiver_records_and_answers(receiver: Receiver) -> None:
    """The receiver records requests and answers as scripted."""
    receiver.responder = lambda req: Response(503 if req.path == "/fail" else 204)
    with httpx.Client() as client:
        assert client.post(receiver.url + "fail", content=b"x").status_code == 503
        assert client.post(receiver.url, json={"a": 1}).status_code == 204
    got = receiver.wait_for(2)
    assert [r.path for r in got] == ["/fail", "/"]
    assert got[1].body == b'{"a":1}'


def test_the_throwaway_cluster_asks_every_role_for_its_password(cluster: Cluster) -> None:
    """Over TCP no role signs in without its own password (scram), the superuser's does
    not open another role, and the right one does."""
    role = f"nobody_{os.getpid()}"
    with cluster.admin() as admin:
        create_role(admin, role)
    try:
        for password in ("", "wrong", None):
            dsn = psycopg.conninfo.make_conninfo(cluster.dsn_for("postgres"), user=role,
                                                 password=password)
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(dsn, connect_timeout=5).close()
        with psycopg.connect(role_dsn(cluster.dsn_for("postgres"), role)) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (role,)
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
