"""Least privilege: the application, dispatcher and operator roles of docs/upgrading.md, exactly.

The operator owns a schema made for it beforehand and runs `outbox migrate`
and `outbox grants`; the application publishes but can neither read a
secret nor change an endpoint; the dispatcher delivers, dead-letters,
disables on 410 and purges, and can make nothing new.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import outbox
from outbox.retention import purge
from outbox.sql import queries
from outbox.testing import Receiver, Request, Response, assert_published
from tests.support.cli import run_outbox
from tests.support.dispatcher import Dispatcher, run_once, wait_until
from tests.support.roles import Roles, ok, setup


def _denied(conn: psycopg.Connection[Any], statement: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement.encode())
    conn.rollback()


def test_application_publishes_and_nothing_more(roles: Roles, receiver: Receiver) -> None:
    """The application role publishes and reads its own events; no secret, no endpoint change."""
    setup(roles, receiver)
    with roles.connect(roles.application) as conn:
        outbox.publish(conn, "order.created", {"n": 1}, key="k", idempotency_key="i-1")
        outbox.publish_many(conn, [outbox.Event("audit.logged", {"n": 2})])
        assert_published(conn, "order.created")
        conn.commit()
        again = outbox.publish(conn, "order.created", {"n": 1}, idempotency_key="i-1")
        conn.commit()
        assert again
        conn.execute("INSERT INTO outbox.inbox (consumer, event_id) VALUES ('billing', 'e1')")
        conn.commit()
        for statement in ("SELECT secret FROM outbox.endpoints",
                          "SELECT url FROM outbox.endpoints",
                          "SELECT headers FROM outbox.endpoints",
                          "UPDATE outbox.endpoints SET enabled = false",
                          "INSERT INTO outbox.endpoints (name, url) VALUES ('x', 'http://x/')",
                          "DELETE FROM outbox.endpoints",
                          "SELECT state, last_error FROM outbox.deliveries",
                          "UPDATE outbox.deliveries SET state = 'dead'",
                          "DELETE FROM outbox.events",
                          "CREATE TABLE outbox.mine (id int)",
                          "SELECT count(*) FROM outbox.maintainer"):
            _denied(conn, statement)
    failed = run_outbox(roles.dsn(roles.application), "endpoints", "list")
    assert failed.returncode == 1


def test_dispatcher_delivers_and_nothing_more(roles: Roles, receiver: Receiver) -> None:
    """The dispatcher role delivers, signs, dead-letters, disables on 410, purges; makes nothing."""
    receiver.responder = lambda r: Response(410 if r.path == "/gone" else 200)
    setup(roles, receiver)
    with roles.connect(roles.application) as conn:
        for n in range(3):
            outbox.publish(conn, "order.created", {"n": n}, key="k")
        outbox.publish(conn, "audit.logged", {"n": 9})
        conn.commit()
    dsn = roles.dsn(roles.dispatcher)
    code, log = run_once(dsn)
    assert code == 1, log  # the 410 is a dead letter
    assert "permission denied" not in log, log
    ok = [r for r in receiver.requests if r.path == "/ok"]
    assert len(ok) == 3
    assert all(isinstance(r, Request) and r.header("webhook-signature") for r in ok)
    with psycopg.connect(roles.dsn(roles.operator)) as conn:
        conn.execute("UPDATE outbox.deliveries SET finished_at = now() - interval '30 days' "
                     "WHERE state = 'delivered'")
        conn.commit()
        disabled = conn.execute("SELECT enabled FROM outbox.endpoints WHERE name = 'gone'"
                                ).fetchone()
    assert disabled == (False,)
    with roles.connect(roles.dispatcher) as conn:
        purged = purge(conn, timedelta(days=7))
        assert purged
        for statement in ("INSERT INTO outbox.endpoints (name, url) VALUES ('x', 'http://x/')",
                          "UPDATE outbox.endpoints SET url = 'http://evil/'",
                          "UPDATE outbox.endpoints SET secret = 'whsec_x'",
                          "INSERT INTO outbox.events (id, type, payload) "
                          "VALUES (gen_random_uuid(), 't', '{}')",
                          "SELECT * FROM outbox.inbox",
                          "ALTER TABLE outbox.deliveries ADD COLUMN x int",
                          "CREATE TABLE outbox.mine (id int)",
                          "SELECT * FROM public.orders"):
            _denied(conn, statement)
    added = run_outbox(dsn, "endpoints", "add", "mine", "--url", "http://127.0.0.1:9/")
    assert added.returncode == 1, added.stdout


def test_operator_runs_every_command_and_nothing_more(roles: Roles, receiver: Receiver) -> None:
    """The operator owns the schema and runs every command; the application's tables stay closed."""
    setup(roles, receiver)
    op = roles.dsn(roles.operator)
    for args in (("migrate", "--check"), ("status",), ("dead", "list"), ("endpoints", "list"),
                 ("replay", "--endpoint", "rx", "--since", "2000-01-01T00:00:00Z"),
                 ("purge", "--older-than", "7d")):
        ok(run_outbox(op, *args))
    with roles.connect(roles.operator) as conn:
        _denied(conn, "SELECT * FROM public.orders")
        _denied(conn, "CREATE SCHEMA elsewhere")


def test_a_dispatcher_without_its_grants_waits_not_ready_naming_what_is_missing(
        roles: Roles, receiver: Receiver) -> None:
    """A dispatcher role with no grants: --once exits 1 with one line naming USAGE on the
    schema and `outbox grants`, no traceback; a running one answers /readyz 503 and says
    which privileges are missing (retention's DELETE too), then starts by itself once
    they are granted."""
    op = roles.dsn(roles.operator)
    ok(run_outbox(op, "migrate"))
    dsn = roles.dsn(roles.dispatcher)
    code, log = run_once(dsn)
    assert code == 1, log
    assert "Traceback" not in log, log
    [line] = [x for x in log.splitlines() if "lacks privileges" in x]
    assert f"the role {roles.dispatcher} lacks privileges the dispatcher needs: USAGE on " \
        "schema outbox; as the schema's owner, run `outbox grants" in line, line
    grants = ok(run_outbox(None, "grants", "--application", roles.application,
                            "--dispatcher", roles.dispatcher))
    with psycopg.connect(op, autocommit=True) as conn:
        conn.execute(grants.encode())
        conn.execute(f"REVOKE DELETE ON outbox.events FROM {roles.dispatcher}".encode())
    with Dispatcher(dsn) as dispatcher:
        wait_until(lambda: "DELETE on outbox.events" in dispatcher.log(), dispatcher=dispatcher,
                   what="the missing privilege named")
        assert dispatcher.get("/readyz").status_code == 503
        with psycopg.connect(op, autocommit=True) as conn:
            conn.execute(f"GRANT DELETE ON outbox.events TO {roles.dispatcher}".encode())
        wait_until(lambda: dispatcher.get("/readyz").status_code == 200, timeout=60,
                   dispatcher=dispatcher, what="ready once granted")
        log = dispatcher.log()
    assert "Traceback" not in log, log
    assert "DELETE on outbox.events" in log
    assert "USAGE on schema" not in log.split("DELETE on outbox.events")[0]


def test_the_start_check_asks_for_exactly_what_outbox_grants_gives_the_dispatcher(
        roles: Roles) -> None:
    """With USAGE only, the dispatcher's start check names every privilege that
    `outbox grants` gives its role, and nothing else."""
    op = roles.dsn(roles.operator)
    ok(run_outbox(op, "migrate"))
    grants = ok(run_outbox(None, "grants", "--application", roles.application,
                            "--dispatcher", roles.dispatcher))
    granted = set()
    statement = re.compile(r"GRANT (?P<what>.+?) ON (?P<tables>.+?) TO (?P<role>\S+);",
                           re.DOTALL)
    for found in statement.finditer(grants):
        if found["role"].strip('"') != roles.dispatcher or "SCHEMA" in found["tables"]:
            continue
        privileges = re.findall(r"\w+(?: \([^)]*\))?", found["what"])
        for table in re.split(r",\s*", found["tables"].strip()):
            granted |= {f"{privilege} on {table}" for privilege in privileges}
    with psycopg.connect(op, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA outbox TO {roles.dispatcher}".encode())
    with roles.connect(roles.dispatcher) as conn:
        row = conn.execute(queries["dispatcher_privileges"]).fetchone()
    assert row is not None
    assert set(row[1]) == granted
    assert len(granted) > 20
