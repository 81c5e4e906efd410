"""The endpoint manager: the role of the application's endpoint functions, and what `outbox
grants` records of every role.

The roles are made as docs/upgrading.md makes them (tests/support/roles.py):
the operator owns the schema, the others get what `outbox grants` gives them.
The manager runs outbox.endpoints as a customers' settings page would; by
SQL it must not read a secret, a header value or a payload, store an env:
secret, touch an endpoint without a tenant, or finish a delivery.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox import endpoints
from outbox.testing import Receiver
from tests.support.cli import run_outbox
from tests.support.roles import SECRET, Roles, ok, setup

OTHER_SECRET = "whsec_" + "QUJD" * 8


def _manager_ready(roles: Roles, receiver: Receiver) -> None:
    """The roles of setup() (two endpoints of no tenant: rx, gone), the manager granted,
    and a tenant's endpoint with a secret and a header, added by the manager."""
    setup(roles, receiver)
    ok(run_outbox(roles.dsn(roles.operator), "grants", "--endpoint-manager", roles.manager,
                  "--apply"))
    with roles.connect(roles.manager) as conn:
        endpoints.add(conn, "acme-hook", url=receiver.url + "acme", events=["order.*"],
                      secret=SECRET, tenant="acme", headers={"Authorization": "Bearer acme"})
        conn.commit()


def _refused(conn: psycopg.Connection[Any], statement: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement.encode())
    conn.rollback()


def test_the_functions_work_with_the_managers_grants_alone(roles: Roles,
                                                            receiver: Receiver) -> None:
    """With only `grants --endpoint-manager`, the endpoint functions work on a tenant's
    endpoint: add, get, list, update (URL, headers, secret), disable, enable, rotate, remove;
    get and list show the secret's kind and the header names, never their values."""
    _manager_ready(roles, receiver)
    with roles.connect(roles.manager) as conn:
        shown = endpoints.get(conn, "acme-hook")
        assert shown["signing"] == "whsec"
        assert shown["headers"] == {"authorization": "(hidden)"}
        assert [e["name"] for e in endpoints.list(conn, tenant="acme")] == ["acme-hook"]
        assert endpoints.update(conn, "acme-hook", url=receiver.url + "acme2",
                                headers={"X-Customer": "acme"}) == ["url", "headers"]
        assert endpoints.update(conn, "acme-hook", secret=OTHER_SECRET) == ["secret"]
        endpoints.disable(conn, "acme-hook")
        endpoints.enable(conn, "acme-hook")
        rotated = endpoints.rotate_secret(conn, "acme-hook", overlap="1h")
        assert rotated.startswith("whsec_")
        assert endpoints.get(conn, "acme-hook")["signing_previous_until"] is not None
        endpoints.add(conn, "acme-spare", url=receiver.url + "spare", tenant="acme")
        assert endpoints.remove(conn, "acme-spare") == 0
        conn.commit()
    with roles.connect(roles.operator) as conn:
        row = conn.execute("SELECT url, secret, headers FROM outbox.endpoints "
                           "WHERE name = 'acme-hook' AND removed_at IS NULL").fetchone()
    assert row == (receiver.url + "acme2", rotated, {"x-customer": "acme"})


def test_every_function_works_as_the_manager_on_its_tenants_endpoint(
        roles: Roles, receiver: Receiver) -> None:
    """Every outbox.endpoints function, under the tenant guard, as the manager role alone:
    the deliveries' changes (retry-now, dead retry, stop sending, a forced removal) go
    through the schema's functions, a test event and a replay as the application's."""
    _manager_ready(roles, receiver)
    acme = {"as_tenant": "acme"}
    with roles.connect(roles.manager) as conn:
        sent = endpoints.send_test(conn, "acme-hook", **acme)
        conn.commit()
        log = endpoints.deliveries(conn, "acme-hook", **acme)
        assert [(row["event_id"], row["state"]) for row in log] == [(str(sent), "pending")]
        assert [d["endpoint"] for d in endpoints.attempts(conn, sent, **acme)] == ["acme-hook"]
        assert endpoints.retry_now(conn, "acme-hook", **acme) == 0  # due already
        assert endpoints.replay(conn, "acme-hook", since=timedelta(hours=1), **acme) == 0
        assert endpoints.retry_dead(conn, "acme-hook", **acme) == 0
        conn.commit()
    with roles.connect(roles.operator) as conn:  # a dead letter and a delivered one
        conn.execute("UPDATE outbox.deliveries SET state = 'dead', finished_at = now() "
                     "WHERE event_id = %s", (sent,))
        conn.commit()
    with roles.connect(roles.manager) as conn:
        assert endpoints.retry_dead(conn, "acme-hook", **acme) == 1
        assert endpoints.disable(conn, "acme-hook", drop=True, **acme) == 1
        endpoints.enable(conn, "acme-hook", **acme)
        endpoints.send_test(conn, "acme-hook", **acme)
        assert endpoints.remove(conn, "acme-hook", force=True, **acme) == 1
        conn.commit()
    with roles.connect(roles.operator) as conn:
        states = conn.execute("SELECT d.state FROM outbox.deliveries d "
                              "JOIN outbox.endpoints e ON e.id = d.endpoint_id "
                              "WHERE e.name = 'acme-hook' ORDER BY d.id").fetchall()
    assert states == [("discarded",), ("dead",)]


def test_by_sql_the_manager_reads_no_secret_and_finishes_nothing(roles: Roles,
                                                                  receiver: Receiver) -> None:
    """The manager's SQL cannot read a secret, a header value or a payload, store an env:
    secret, change an endpoint without a tenant (nor take a tenant away), move a delivery
    to delivered or dead, or write an attempt; each refusal changes nothing."""
    _manager_ready(roles, receiver)
    with roles.connect(roles.application) as conn:
        outbox.publish(conn, "order.created", {"card": "4111"}, tenant="acme")
        conn.commit()
    with roles.connect(roles.operator) as conn:
        before = conn.execute("SELECT name, url, secret, tenant, enabled FROM outbox.endpoints "
                              "ORDER BY id").fetchall()
    with roles.connect(roles.manager) as conn:
        for statement in (
                "SELECT secret FROM outbox.endpoints",
                "SELECT previous_secrets FROM outbox.endpoints",
                "SELECT headers FROM outbox.endpoints",
                "SELECT count(*) FROM outbox.endpoints WHERE secret LIKE 'whsec_A%'",
                "UPDATE outbox.endpoints SET url = secret WHERE name = 'acme-hook'",
                "UPDATE outbox.endpoints SET url = 'http://x/' WHERE name = 'acme-hook' "
                "RETURNING secret",
                "SELECT payload FROM outbox.events",
                "SELECT headers FROM outbox.events",
                "UPDATE outbox.deliveries SET state = 'delivered'",
                "UPDATE outbox.deliveries SET state = 'dead'",
                "DELETE FROM outbox.deliveries",
                "INSERT INTO outbox.attempts (delivery_id, attempt, reason) "
                "VALUES (1, 1, 'other')",
                "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state) "
                "SELECT id, 1, seq, 'delivered' FROM outbox.events",
                "UPDATE outbox.endpoint_state SET circuit = 'open'",
                "DELETE FROM outbox.endpoints"):
            _refused(conn, statement)
        assert conn.execute("SELECT * FROM outbox.rotate_endpoint_secret('rx', %s, 0, NULL)",
                            (OTHER_SECRET,)).fetchall() == []  # of no tenant: not there
        conn.rollback()
        for statement in (  # the guard: rows of no tenant, and env: secrets
                "UPDATE outbox.endpoints SET url = 'http://attacker/' WHERE name = 'rx'",
                "UPDATE outbox.endpoints SET enabled = false WHERE name = 'gone'",
                "UPDATE outbox.endpoints SET tenant = NULL WHERE name = 'acme-hook'",
                "UPDATE outbox.endpoints SET secret = 'env:OUTBOX_SECRET_AUDIT' "
                "WHERE name = 'acme-hook'",
                "INSERT INTO outbox.endpoints (name, url, tenant, secret) VALUES "
                "('acme-2', 'http://x/', 'acme', 'env:OUTBOX_SECRET_AUDIT')",
                "INSERT INTO outbox.endpoints (name, url) VALUES ('mine', 'http://x/')"):
            _refused(conn, statement)
        with pytest.raises(endpoints.EndpointNotFound):  # the definer function's rule
            endpoints.rotate_secret(conn, "rx")
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM outbox.delivery_log").fetchone() == (2,)
    with roles.connect(roles.operator) as conn:
        after = conn.execute("SELECT name, url, secret, tenant, enabled FROM outbox.endpoints "
                             "ORDER BY id").fetchall()
        states = conn.execute("SELECT state FROM outbox.deliveries").fetchall()
    assert after == before
    assert states == [("pending",), ("pending",)]


def test_the_operator_keeps_env_secrets_and_endpoints_of_no_tenant(
        roles: Roles, receiver: Receiver) -> None:
    """The schema's owner passes the guard: an env: secret, an endpoint of no tenant,
    rotated through the same function the manager uses."""
    _manager_ready(roles, receiver)
    op = roles.dsn(roles.operator)
    ok(run_outbox(op, "endpoints", "update", "rx", "--secret", "env:OUTBOX_SECRET_RX"))
    ok(run_outbox(op, "endpoints", "rotate-secret", "rx", "--overlap", "1h"))
    ok(run_outbox(op, "endpoints", "rotate-secret", "gone", "--secret", "env:OUTBOX_SECRET_GONE"))
    with psycopg.connect(op) as conn:
        rows = conn.execute("SELECT name, secret FROM outbox.endpoints "
                            "WHERE name IN ('rx', 'gone') ORDER BY name").fetchall()
    assert rows[0] == ("gone", "env:OUTBOX_SECRET_GONE")
    assert rows[1][1].startswith("whsec_")


def test_grants_are_recorded_and_every_apply_keeps_each_kind(roles: Roles,
                                                             receiver: Receiver) -> None:
    """A role granted as the application and as the endpoint manager keeps both through a
    later --apply naming one kind; the printed text for one kind refuses, changing nothing;
    --check names nothing missing, then each privilege taken away, and exits 1."""
    setup(roles, receiver)
    op = roles.dsn(roles.operator)
    both = roles.application
    ok(run_outbox(op, "grants", "--endpoint-manager", both, "--apply"))
    ok(run_outbox(op, "grants", "--application", both, "--apply"))
    with roles.connect(both) as conn:  # still a manager: it reads the log
        conn.execute("SELECT count(*) FROM outbox.delivery_log")
    with psycopg.connect(op) as conn:
        kinds = conn.execute("SELECT kind FROM outbox.grantees WHERE role = %s ORDER BY kind",
                             (both,)).fetchall()
    assert kinds == [("application",), ("endpoint-manager",)]
    printed = ok(run_outbox(None, "grants", "--application", both))
    with psycopg.connect(op, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.RaiseException, match="also granted for other"):
        conn.execute(printed.encode())
    checked = run_outbox(op, "grants", "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "missing" not in checked.stdout
    with psycopg.connect(op, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE SELECT ON outbox.delivery_log FROM {}").format(
            sql.Identifier(both)))
        conn.execute(sql.SQL("REVOKE UPDATE (enabled) ON outbox.endpoints FROM {}").format(
            sql.Identifier(roles.dispatcher)))
    checked = run_outbox(op, "grants", "--check")
    assert checked.returncode == 1
    assert f"{both}: missing SELECT ON outbox.delivery_log" in checked.stdout
    assert f"{roles.dispatcher}: missing UPDATE (enabled) ON outbox.endpoints" in checked.stdout
    named = run_outbox(op, "grants", "--check", "--dispatcher", roles.dispatcher)
    assert named.returncode == 1
    assert both not in named.stdout
    ok(run_outbox(op, "grants", "--dispatcher", roles.dispatcher, "--apply"))  # all again
    assert run_outbox(op, "grants", "--check").returncode == 0


def test_grants_all_goes_through_every_database(roles: Roles, receiver: Receiver,
                                                tmp_path: Path) -> None:
    """--all with --apply or --check: a line per database, on past one that is down."""
    setup(roles, receiver)
    file = tmp_path / "dbs.toml"
    file.write_text(f'[[database]]\nname = "main"\ndsn = "{roles.dsn(roles.operator)}"\n'
                    '[[database]]\nname = "down"\n'
                    'dsn = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"\n')
    applied = run_outbox(None, "grants", "--all", "--apply", "--databases", str(file),
                         "--endpoint-manager", roles.manager)
    assert applied.returncode == 1
    assert "main: granted" in applied.stdout
    assert "down: unreachable: " in applied.stdout
    checked = run_outbox(None, "grants", "--all", "--check", "--databases", str(file))
    assert "main: ok" in checked.stdout
    assert run_outbox(None, "grants", "--all", "--databases", str(file)).returncode == 2


@pytest.mark.parametrize("args", [(), ("--application", ""), ("--apply",),
                                  ("--apply", "--check", "--viewer", "v")])
def test_bad_grants_usage_is_refused(args: tuple[str, ...]) -> None:
    """No role to print, an empty role, --apply with none, --apply with --check: exit 2."""
    result = run_outbox("postgresql://nobody@127.0.0.1:9/none", "grants", *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
