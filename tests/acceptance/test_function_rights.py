"""No function of the outbox runs with its owner's rights for another role.

The reproducer of a review, run as the real application role of
docs/upgrading.md: it owns a schema for its own tables, and tries to attach
the attempt history's trigger function to a table of its own, with a type
and an implicit cast whose function records who it runs as.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox.testing import Receiver
from tests.support.cli import run_outbox
from tests.support.roles import Roles, ok, setup

# A table, type and cast of the application's own; the cast's function writes
# down whose rights it runs with (a definer function would run it as the owner).
_BAIT = """
CREATE TABLE mine.seen (who text);
GRANT INSERT ON mine.seen TO PUBLIC;
CREATE TYPE mine.sneaky AS (v bigint);
CREATE FUNCTION mine.sneaky_id(mine.sneaky) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mine.seen VALUES (current_user);
    RETURN ($1).v;
END
$$;
CREATE CAST (mine.sneaky AS bigint) WITH FUNCTION mine.sneaky_id(mine.sneaky) AS IMPLICIT;
CREATE TABLE mine.t (id mine.sneaky);
INSERT INTO mine.t SELECT ROW(d.id)::mine.sneaky FROM generate_series(1, 3) AS d(id);
"""
_TRIGGER = """
CREATE TRIGGER gone AFTER DELETE ON mine.t REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.attempts_follow_deliveries()
"""


def _history(roles: Roles) -> int:
    with roles.connect(roles.operator) as conn:
        row = conn.execute("SELECT count(*) FROM outbox.attempts").fetchone()
        return int(row[0]) if row else -1


def _with_history(roles: Roles, receiver: Receiver) -> None:
    """The three roles set up, and an attempt history of three rows."""
    setup(roles, receiver)
    with roles.connect(roles.operator) as conn:
        conn.execute("INSERT INTO outbox.attempts (delivery_id, attempt, reason) "
                     "SELECT d, 1, 'http_5xx' FROM generate_series(1, 3) AS d")
    with psycopg.connect(roles.cluster.dsn_for(roles.database), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA mine AUTHORIZATION {}").format(
            sql.Identifier(roles.application)))
    with roles.connect(roles.application) as conn:
        conn.execute(_BAIT.encode())


def test_application_cannot_attach_the_history_trigger(roles: Roles,
                                                       receiver: Receiver) -> None:
    """The application may not make a trigger of an outbox function: EXECUTE is the owner's."""
    _with_history(roles, receiver)
    with roles.connect(roles.application) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="function"):
            conn.execute(_TRIGGER.encode())
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM mine.seen").fetchone() == (0,)
    assert _history(roles) == 3


def test_the_history_trigger_refuses_a_table_not_its_own(roles: Roles,
                                                         receiver: Receiver) -> None:
    """Even given EXECUTE, the function refuses a foreign table and never runs as the owner."""
    _with_history(roles, receiver)
    with roles.connect(roles.operator) as conn:  # an owner's mistake, on purpose
        conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION outbox.attempts_follow_deliveries() "
                             "TO {}").format(sql.Identifier(roles.application)))
    with roles.connect(roles.application) as conn:
        conn.execute(_TRIGGER.encode())
        conn.commit()
        with pytest.raises(psycopg.errors.RaiseException, match=r"outbox\.deliveries only"):
            conn.execute("DELETE FROM mine.t")
        conn.rollback()
        seen = conn.execute("SELECT who FROM mine.seen").fetchall()
    assert seen == []  # the cast never ran, as the owner or anyone
    assert _history(roles) == 3


DEFINERS = {"outbox.endpoint_fleet_rows()", "outbox.endpoint_backlog_rows()",
            "outbox.rotate_endpoint_secret(text,text,double precision,text)",
            "outbox.retry_endpoint_now(bigint,text)",
            "outbox.bury_endpoint_deliveries(bigint,text)",
            "outbox.discard_endpoint_pending(text,text)",
            "outbox.retry_dead_deliveries(bigint,uuid[],text[],timestamp with time zone,"
            "timestamp with time zone,text,boolean)"}
"""With their owner's rights, for the endpoint manager alone: the triggers that keep an
endpoint's fleet rows (which fire for a write the application and the dispatcher never
make), and the functions granted to that role alone."""


def test_no_function_of_the_schema_is_definer_or_public(roles: Roles,
                                                        receiver: Receiver) -> None:
    """The catalogue: no SECURITY DEFINER function but the endpoint manager's; none
    executable by PUBLIC or either role but the fleet's rule functions, which compute from
    their arguments and write nothing."""
    setup(roles, receiver)
    with roles.connect(roles.operator) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, p.prosecdef, "
            "       has_function_privilege(%s, p.oid, 'EXECUTE'), "
            "       has_function_privilege(%s, p.oid, 'EXECUTE'), "
            "       coalesce(p.proacl::text, 'default: PUBLIC'), p.proname ~ '_v[0-9]+$', "
            "       l.lanname, p.provolatile, p.prorettype = 'trigger'::regtype, p.proconfig "
            "FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
            "WHERE p.pronamespace = 'outbox'::regnamespace",
            (roles.application, roles.dispatcher)).fetchall()
    assert rows, "no functions found"
    assert any(row[5] for row in rows), "no rule functions found"
    for name, definer, application, dispatcher, acl, rule, language, volatility, trigger, \
            config in rows:
        assert not definer or name in DEFINERS, name
        if rule:  # LANGUAGE sql, STABLE or IMMUTABLE (no writes), no SET: inlined
            assert (language, volatility, trigger, config) == ("sql", volatility, False,
                                                               None), name
            assert volatility in ("s", "i"), name
            continue
        assert not application, (name, acl)
        assert not dispatcher, (name, acl)
        assert "=X/" not in acl.replace(f"{roles.operator}=X/", ""), (name, acl)


def test_application_writes_only_the_columns_publish_writes(roles: Roles,
                                                            receiver: Receiver) -> None:
    """A forged dead letter, state or error is refused to the application; publishing is not."""
    setup(roles, receiver)
    with roles.connect(roles.application) as conn:
        for statement in (
                "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, last_error) "
                "VALUES (gen_random_uuid(), 1, 1, 'dead', e'\\x1b[2Jforged')",
                "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, attempts) "
                "VALUES (gen_random_uuid(), 1, 1, 99)",
                "INSERT INTO outbox.events (id, type, payload, seq) "
                "OVERRIDING SYSTEM VALUE VALUES (gen_random_uuid(), 'x', '{}', 1)",
                "INSERT INTO outbox.inbox (consumer, event_id, processed_at) "
                "VALUES ('c', 'e', 'infinity')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement.encode())
            conn.rollback()


def test_grants_apply_and_refuse_the_owner(roles: Roles) -> None:
    """`grants --apply` grants over the operator's connection; naming the owner is exit 2."""
    op = roles.dsn(roles.operator)
    ok(run_outbox(op, "migrate"))
    refused = run_outbox(op, "grants", "--application", roles.operator, "--dispatcher",
                         roles.dispatcher, "--apply")
    assert refused.returncode == 2, refused.stderr
    assert "owns the outbox schema" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert run_outbox(op, "status").returncode == 0  # the owner keeps its rights
    with roles.connect(roles.application) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT 1 FROM outbox.events")  # and nothing was granted
    applied = run_outbox(op, "grants", "--application", roles.application, "--dispatcher",
                         roles.dispatcher, "--apply")
    assert applied.returncode == 0, applied.stderr
    with roles.connect(roles.application) as conn:
        conn.execute("SELECT count(*) FROM outbox.events")
    missing = run_outbox(op, "grants", "--application", "nobody_here", "--dispatcher",
                         roles.dispatcher, "--apply")
    assert missing.returncode == 2
    assert "no such role" in missing.stderr


def _psql(cluster_bindir: Path | None) -> str | None:
    found = shutil.which("psql")
    if found:
        return found
    if cluster_bindir and (cluster_bindir / "psql").exists():
        return str(cluster_bindir / "psql")
    return None


def test_printed_grants_naming_the_owner_change_nothing(roles: Roles) -> None:
    """The printed grants, piped to psql without ON_ERROR_STOP, never lock the owner out."""
    server: Any = roles.cluster.server
    psql = _psql(server.bindir if server else None)
    if psql is None:
        pytest.skip("no psql here")
    op = roles.dsn(roles.operator)
    ok(run_outbox(op, "migrate"))
    text = ok(run_outbox(None, "grants", "--application", roles.operator,
                         "--dispatcher", roles.operator))
    piped = subprocess.run([psql, op], input=text, capture_output=True, text=True,
                           timeout=60, check=False)
    assert "owns the outbox schema" in piped.stderr, piped.stderr
    status = run_outbox(op, "status")
    assert status.returncode == 0, status.stderr
