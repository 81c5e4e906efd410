"""`outbox endpoints retry-now` run as a real command: the number made due, --dry-run,
--tenant, its errors, the viewer refused, and a real dispatcher sending the probe at once."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

import outbox
from outbox import endpoints
from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support.cli import run_outbox
from tests.support.dispatcher import FAST_ARGS, Dispatcher, wait_for_state
from tests.support.roles import Roles, create_role, ok, role_dsn, setup

Conn = psycopg.Connection[Any]


def retry_now(dsn: str, *args: str) -> Any:
    return run_outbox(dsn, "endpoints", "retry-now", *args)


def later(conn: Conn, *, circuit_open: bool = True) -> None:
    """Every pending delivery waits an hour; every endpoint's circuit opened just now."""
    conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() + interval '1 hour' "
                 "WHERE state = 'pending'")
    if circuit_open:
        conn.execute("UPDATE outbox.endpoint_state SET circuit = 'open', opened_at = now()")
    conn.commit()


def due_now(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' "
                       "AND next_attempt_at <= clock_timestamp()").fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def test_prints_the_number_made_due_and_dry_run_changes_nothing(conn: Conn, dsn: str) -> None:
    """retry-now prints the number of deliveries made due (with --tenant, that tenant's
    only); --dry-run prints the same number and changes nothing."""
    endpoints.add(conn, "hook", url="http://127.0.0.1:9/h")
    for tenant in ("acme", "acme", "globex"):
        outbox.publish(conn, "order.placed", {}, tenant=tenant)
    conn.commit()
    later(conn)
    dry = retry_now(dsn, "hook", "--tenant", "acme", "--dry-run")
    assert (dry.returncode, dry.stdout.strip()) == (0, "2"), dry.stderr
    assert "nothing changed" in dry.stderr
    assert "would go half-open" in dry.stderr
    assert due_now(conn) == 0
    done = retry_now(dsn, "hook", "--tenant", "acme")
    assert (done.returncode, done.stdout.strip()) == (0, "2"), done.stderr
    assert "half-open" in done.stderr
    assert due_now(conn) == 2
    rest = retry_now(dsn, "hook")
    assert (rest.returncode, rest.stdout.strip()) == (0, "1"), rest.stderr
    assert due_now(conn) == 3


def test_errors_exit_as_the_other_endpoint_commands(conn: Conn, dsn: str) -> None:
    """An unknown name exits 1 as `enable` does for one; a bad tenant exits 2 before the
    database is asked; a disabled endpoint's deliveries are made due and said to wait."""
    endpoints.add(conn, "hook", url="http://127.0.0.1:9/h")
    outbox.publish(conn, "order.placed", {})
    conn.commit()
    later(conn, circuit_open=False)
    unknown, enable = retry_now(dsn, "nope"), run_outbox(dsn, "endpoints", "enable", "nope")
    assert unknown.returncode == enable.returncode == 1
    assert "nope" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    bad = retry_now(dsn, "hook", "--tenant", "a b\u00e9")
    assert bad.returncode == 2
    assert "--tenant" in bad.stderr
    assert "Traceback" not in bad.stderr + unknown.stderr
    assert due_now(conn) == 0
    ok(run_outbox(dsn, "endpoints", "disable", "hook"))
    held = retry_now(dsn, "hook")
    assert (held.returncode, held.stdout.strip()) == (0, "1"), held.stderr
    assert "wait until it is enabled" in held.stderr


def test_the_viewer_is_refused_in_one_line(roles: Roles, receiver: Receiver,
                                           cluster: Cluster) -> None:
    """The viewer role (no writes) gets one line saying retry-now needs a role that may
    change deliveries, exit 1; its --dry-run works; the operator's retry-now works."""
    setup(roles, receiver)
    viewer = f"viewer_{roles.operator.removeprefix('operator_')}"
    with cluster.admin() as admin:
        create_role(admin, viewer)
    grants = ok(run_outbox(None, "grants", "--application", roles.application,
                           "--dispatcher", roles.dispatcher, "--viewer", viewer))
    operator = roles.dsn(roles.operator)
    try:
        with psycopg.connect(operator, autocommit=True) as conn:
            conn.execute(grants.encode())
        with roles.connect(roles.application) as conn:
            outbox.publish(conn, "order.placed", {})
            conn.commit()
        with psycopg.connect(operator) as conn:
            later(conn)
        viewed = role_dsn(roles.cluster.dsn_for(roles.database), viewer)
        refused = retry_now(viewed, "rx")
        assert refused.returncode == 1, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert "retry-now needs a role that may change deliveries" in refused.stderr
        assert ok(retry_now(viewed, "rx", "--dry-run")).strip() == "1"
        assert ok(retry_now(operator, "rx")).strip() == "1"
    finally:
        with psycopg.connect(cluster.dsn_for(roles.database), autocommit=True) as owner:
            owner.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(viewer)))
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(viewer)))


def test_a_real_dispatcher_sends_the_probe_at_once(conn: Conn, dsn: str,
                                                   receiver: Receiver) -> None:
    """An endpoint whose circuit is open for an hour more, with a delivery due in an hour:
    after retry-now a running dispatcher delivers it within seconds (the probe), and the
    circuit closes."""
    endpoint_id = conn.execute(
        "INSERT INTO outbox.endpoints (name, url, events, events_like, "
        "breaker_cooldown_seconds) VALUES ('rx', %s, '{*}', '{%%}', 3600) RETURNING id",
        (receiver.url + "fixed",)).fetchone()
    assert endpoint_id is not None
    conn.commit()
    event_id = outbox.publish(conn, "order.placed", {"n": 1})
    conn.commit()
    later(conn)
    with Dispatcher(dsn, *FAST_ARGS) as dispatcher:
        # The dispatcher has had its chances to claim: the circuit holds it back.
        dispatcher.wait_serving()
        assert receiver.snapshot() == []
        assert ok(retry_now(dsn, "rx")).strip() == "1"
        wait_for_state(conn, event_id, "delivered", timeout=30, dispatcher=dispatcher)
    assert len(receiver.snapshot()) == 1
    row = conn.execute("SELECT circuit FROM outbox.endpoint_state WHERE endpoint_id = %s",
                       endpoint_id).fetchone()
    conn.commit()
    assert row == ("closed",)
