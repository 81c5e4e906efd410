"""A dispatcher waits for its schema; --once gives up on what waiting cannot fix."""

from __future__ import annotations

import time

import psycopg
import pytest

from outbox.migrate import SCHEMA_VERSION, migrate
from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, run_once, wait_until
from tests.support.releases import previous


def _older_database(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(previous().schema_sql().encode())


def test_waits_for_an_older_schema_then_dispatches(empty_dsn: str, receiver: Receiver) -> None:
    """Older schema: /readyz 503, one ERROR naming both versions; dispatches once upgraded."""
    _older_database(empty_dsn)
    with Dispatcher(empty_dsn) as dispatcher:
        def said() -> bool:
            return "outbox migrate" in dispatcher.log()
        wait_until(said, what="the dispatcher to log the schema problem", dispatcher=dispatcher)
        assert dispatcher.get("/readyz").status_code == 503
        assert dispatcher.get("/healthz").status_code == 200
        time.sleep(1.0)  # several checks (every 0.2 s) pass: still one line within 30 s
        lines = [line for line in dispatcher.log().splitlines() if "not dispatching" in line]
        assert len(lines) == 1, dispatcher.log()
        assert "ERROR" in lines[0]
        assert f"version {previous().version}" in lines[0]
        assert f"version {SCHEMA_VERSION}" in lines[0]
        with psycopg.connect(empty_dsn) as conn:
            migrate(conn)
            add_endpoint(conn, "rx", receiver.url)
            publish(conn, "order.created", {"n": 1})
            conn.commit()
        receiver.wait_for(1, timeout=30)
        assert dispatcher.get("/readyz").status_code == 200
        assert "Traceback" not in dispatcher.log()


def test_once_on_an_older_schema_exits_one(empty_dsn: str) -> None:
    """--once on an older schema exits 1 at once with the versions and `outbox migrate`."""
    _older_database(empty_dsn)
    code, log = run_once(empty_dsn, timeout=30)
    assert code == 1, log
    assert f"version {SCHEMA_VERSION}" in log
    assert "outbox migrate" in log


def test_once_without_the_schema_exits_one(empty_dsn: str) -> None:
    """--once on a database without the outbox exits 1 naming `outbox migrate`."""
    code, log = run_once(empty_dsn, timeout=30)
    assert code == 1, log
    assert "outbox migrate" in log
    assert "Traceback" not in log


@pytest.mark.parametrize(("setting", "said"), [
    ({"dbname": "no_such_database"}, "does not exist"),
    ({"user": "no_such_role"}, "authentication failed"),  # scram: no telling which
], ids=["missing database", "unknown role"])
def test_once_refused_by_the_server_exits_one(cluster: Cluster, setting: dict[str, str],
                                              said: str) -> None:
    """--once ends with exit 1 and the reason when the server refuses it for good."""
    dsn = psycopg.conninfo.make_conninfo(cluster.admin_dsn, **setting)
    code, log = run_once(dsn, timeout=30)
    assert code == 1, log
    assert said in log
    assert "Traceback" not in log
