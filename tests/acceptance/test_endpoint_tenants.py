"""Endpoints of a tenant from the command line: --tenant on add and update, --no-tenant, the
TOML key, list --tenant and --json, bad tenants refused, publish's routing, replay and dead
retry kept to the endpoint's tenant, and the dispatcher's refusal of another tenant's event."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

import outbox
from outbox.testing import Receiver
from tests.support.cli import run_outbox
from tests.support.dispatcher import run_once

Conn = psycopg.Connection[Any]


def _ok(dsn: str, *args: str) -> str:
    result = run_outbox(dsn, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _tenants(dsn: str, *args: str) -> dict[str, str | None]:
    return {e["name"]: e["tenant"] for e in json.loads(_ok(dsn, "endpoints", "list", "--json",
                                                             *args))}


def snapshot(conn: Conn) -> list[tuple[Any, ...]]:
    """Every endpoint row whole, to show that a refused command changed nothing."""
    rows = conn.execute("SELECT e::text FROM outbox.endpoints e ORDER BY id").fetchall()
    conn.commit()
    return rows


def _publish(conn: Conn, event_type: str, tenant: str | None) -> uuid.UUID:
    event_id = outbox.publish(conn, event_type, {"t": tenant}, tenant=tenant)
    conn.commit()
    return event_id


def _routes(conn: Conn, event_id: uuid.UUID) -> list[str]:
    rows = conn.execute("SELECT e.name FROM outbox.deliveries d JOIN outbox.endpoints e "
                        "ON e.id = d.endpoint_id WHERE d.event_id = %s ORDER BY e.name",
                        (event_id,)).fetchall()
    conn.commit()
    return [name for (name,) in rows]


@pytest.fixture
def three(dsn: str) -> str:
    """acme's and globex's endpoints for order.*, and an audit endpoint without a tenant."""
    _ok(dsn, "endpoints", "add", "acme-hook", "--url", "http://127.0.0.1:9/a",
        "--events", "order.*", "--tenant", "acme")
    _ok(dsn, "endpoints", "add", "globex-hook", "--url", "http://127.0.0.1:9/g",
        "--events", "order.*", "--tenant", "globex")
    _ok(dsn, "endpoints", "add", "audit", "--url", "http://127.0.0.1:9/audit")
    return dsn


def test_add_list_and_json_carry_the_tenant(three: str) -> None:
    """add --tenant is kept; list --json says "tenant" (null for none); list --tenant keeps
    that tenant's endpoints, and the table shows the tenant."""
    assert _tenants(three) == {"acme-hook": "acme", "audit": None, "globex-hook": "globex"}
    assert _tenants(three, "--tenant", "acme") == {"acme-hook": "acme"}
    assert _tenants(three, "--tenant", "nobody") == {}
    table = _ok(three, "endpoints", "list", "--tenant", "globex")
    assert "globex-hook" in table
    assert "acme-hook" not in table
    assert "TENANT" in table
    shown = json.loads(_ok(three, "endpoints", "show", "acme-hook", "--json"))
    assert shown["tenant"] == "acme"


def test_publish_routes_a_tenants_event_to_its_endpoints_and_the_untenanted(
        conn: Conn, three: str) -> None:
    """An event of acme goes to acme's endpoint and the audit one, never to globex's; an
    event without a tenant goes only to the endpoints without one."""
    assert _routes(conn, _publish(conn, "order.placed", "acme")) == ["acme-hook", "audit"]
    assert _routes(conn, _publish(conn, "order.placed", "globex")) == ["audit", "globex-hook"]
    assert _routes(conn, _publish(conn, "order.placed", None)) == ["audit"]
    assert _routes(conn, _publish(conn, "order.placed", "initech")) == ["audit"]


def test_an_event_no_endpoint_takes_is_unrouted(conn: Conn, dsn: str) -> None:
    """With only tenants' endpoints, another tenant's event (or one without a tenant) is
    kept as unrouted, as an event no pattern matches is."""
    _ok(dsn, "endpoints", "add", "acme-hook", "--url", "http://127.0.0.1:9/a",
        "--tenant", "acme")
    for tenant in ("globex", None, "acme"):
        event_id = _publish(conn, "order.placed", tenant)
        row = conn.execute("SELECT unrouted FROM outbox.events WHERE id = %s",
                           (event_id,)).fetchone()
        conn.commit()
        assert row == (tenant != "acme",)


def test_a_change_of_tenant_applies_to_events_published_afterwards(conn: Conn,
                                                                  three: str) -> None:
    """update --tenant moves the endpoint to another tenant for what is published next;
    --no-tenant (like --unset tenant) makes it everyone's again."""
    before = _publish(conn, "order.placed", "acme")
    assert "updated endpoint acme-hook: tenant" in _ok(
        three, "endpoints", "update", "acme-hook", "--tenant", "globex")
    after = _publish(conn, "order.placed", "acme")
    assert _routes(conn, before) == ["acme-hook", "audit"]
    assert _routes(conn, after) == ["audit"]
    _ok(three, "endpoints", "update", "acme-hook", "--no-tenant")
    assert _tenants(three)["acme-hook"] is None
    assert _routes(conn, _publish(conn, "order.placed", "initech")) == ["acme-hook", "audit"]
    _ok(three, "endpoints", "update", "acme-hook", "--tenant", "acme")
    _ok(three, "endpoints", "update", "acme-hook", "--unset", "tenant")
    assert _tenants(three)["acme-hook"] is None


@pytest.mark.parametrize("tenant", ["", "x" * 201, "a\tb", "caf\u00e9", "a\nb"])
@pytest.mark.parametrize("command", ["add", "update", "list"])
def test_a_tenant_publish_would_refuse_is_a_usage_error(conn: Conn, three: str, tenant: str,
                                                        command: str) -> None:
    """A tenant publish() refuses (empty, too long, not printable ASCII) exits 2 with one
    line naming --tenant, and changes nothing."""
    before = snapshot(conn)
    args = {"add": ["add", "new", "--url", "http://127.0.0.1:9/n"],
            "update": ["update", "acme-hook"], "list": ["list"]}[command]
    result = run_outbox(three, "endpoints", *args, "--tenant", tenant)
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1
    assert "--tenant" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(conn) == before
    assert _tenants(three)["acme-hook"] == "acme"


def test_update_of_an_unknown_option_is_a_usage_error(conn: Conn, three: str) -> None:
    """update --unset of an option that does not exist, or --tenant with --no-tenant: exit 2,
    one line, nothing changed."""
    before = snapshot(conn)
    for args in (["--unset", "colour"], ["--tenant", "a", "--no-tenant"]):
        result = run_outbox(three, "endpoints", "update", "acme-hook", *args)
        assert (result.returncode, result.stderr.count("\n")) == (2, 1), result
    assert snapshot(conn) == before


def test_the_sync_file_takes_a_tenant(conn: Conn, dsn: str, tmp_path: Any) -> None:
    """A [endpoints.NAME] table's tenant key is the endpoint's tenant; a bad one is refused
    with its place in the file; leaving it out returns the endpoint to none."""
    path = tmp_path / "endpoints.toml"
    path.write_text('[endpoints.acme-hook]\nurl = "http://127.0.0.1:9/a"\ntenant = "acme"\n')
    _ok(dsn, "endpoints", "sync", str(path))
    assert _tenants(dsn) == {"acme-hook": "acme"}
    path.write_text('[endpoints.acme-hook]\nurl = "http://127.0.0.1:9/a"\ntenant = ""\n')
    bad = run_outbox(dsn, "endpoints", "sync", str(path))
    assert bad.returncode == 2, bad
    assert "endpoints.acme-hook.tenant" in bad.stderr
    path.write_text('[endpoints.acme-hook]\nurl = "http://127.0.0.1:9/a"\n')
    assert "changed acme-hook: tenant" in _ok(dsn, "endpoints", "sync", str(path))
    assert _tenants(dsn) == {"acme-hook": None}


def _dead_everywhere(conn: Conn) -> None:
    conn.execute("UPDATE outbox.deliveries SET state = 'dead', finished_at = now(), "
                 "last_error = 'HTTP 500'")
    conn.commit()


def _stray(conn: Conn, event_id: uuid.UUID, endpoint: str) -> None:
    """A delivery written by hand, as a publisher that routes by type alone would."""
    conn.execute("INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, tenant) "
                 "SELECT ev.id, ep.id, ev.seq, ev.key, ev.tenant FROM outbox.events ev, "
                 "outbox.endpoints ep WHERE ev.id = %s AND ep.name = %s", (event_id, endpoint))
    conn.commit()


def test_replay_to_a_tenants_endpoint_replays_only_that_tenants_events(
        conn: Conn, three: str) -> None:
    """replay --endpoint of acme's endpoint puts back acme's events only, and counts only
    them; others are left."""
    ids = {t: _publish(conn, "order.placed", t) for t in ("acme", "globex")}
    ids["none"] = _publish(conn, "order.placed", None)
    conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now()")
    conn.commit()
    result = _ok(three, "replay", "--endpoint", "acme-hook", "--since", "1h")
    assert result == "1 event replayed to endpoint 'acme-hook'\n"
    assert _routes(conn, ids["acme"]).count("acme-hook") == 2
    assert "acme-hook" not in _routes(conn, ids["globex"]) + _routes(conn, ids["none"])
    by_id = _ok(three, "replay", "--endpoint", "acme-hook", "--event-id", str(ids["globex"]),
                str(ids["none"]))
    assert by_id.startswith("0 events replayed"), by_id
    assert "acme-hook" not in _routes(conn, ids["globex"]) + _routes(conn, ids["none"])


def test_dead_retry_at_a_tenants_endpoint_retries_only_that_tenants(conn: Conn,
                                                                   three: str) -> None:
    """dead retry --endpoint of acme's endpoint revives acme's dead letters only: another
    tenant's (a stray delivery by hand) stays dead and is not counted."""
    acme = _publish(conn, "order.placed", "acme")
    globex = _publish(conn, "order.placed", "globex")
    _stray(conn, globex, "acme-hook")
    _dead_everywhere(conn)
    result = _ok(three, "dead", "retry", "--endpoint", "acme-hook")
    assert result == "1 dead delivery retried\n", result
    rows = dict(conn.execute(
        "SELECT d.event_id, d.state FROM outbox.deliveries d JOIN outbox.endpoints e "
        "ON e.id = d.endpoint_id WHERE e.name = 'acme-hook'").fetchall())
    conn.commit()
    assert rows == {acme: "pending", globex: "dead"}


def test_the_dispatcher_dead_letters_another_tenants_delivery(conn: Conn, dsn: str,
                                                             receiver: Receiver) -> None:
    """A delivery made by hand of globex's event (or one without a tenant) to acme's
    endpoint is never sent: it becomes a dead letter whose last_error says why; acme's own
    event in the same run is delivered."""
    _ok(dsn, "endpoints", "add", "acme-hook", "--url", f"{receiver.url}/acme",
        "--tenant", "acme", "--max-batch", "10")
    own = _publish(conn, "order.placed", "acme")
    globex = _publish(conn, "order.placed", "globex")
    untenanted = _publish(conn, "order.placed", None)
    _stray(conn, globex, "acme-hook")
    _stray(conn, untenanted, "acme-hook")
    code, log = run_once(dsn)
    assert code == 1, log
    sent = [e["id"] for r in receiver.snapshot() for e in json.loads(r.body)]
    assert sent == [str(own)]
    rows = {event_id: (state, error) for event_id, state, error in conn.execute(
        "SELECT event_id, state, last_error FROM outbox.deliveries").fetchall()}
    conn.commit()
    assert rows[own][0] == "delivered"
    assert rows[globex] == ("dead", "not sent: endpoint acme-hook belongs to tenant 'acme', "
                                    "and this is an event of tenant 'globex'")
    assert rows[untenanted] == ("dead", "not sent: endpoint acme-hook belongs to tenant "
                                        "'acme', and this is an event without a tenant")
    assert "dead-lettered for acme-hook" in log


def test_assert_published_takes_and_returns_the_tenant(conn: Conn, three: str) -> None:
    """outbox.testing.assert_published(tenant=) keeps that tenant's events, and each event
    it returns says its tenant."""
    from outbox.testing import assert_published

    outbox.publish(conn, "order.placed", {"n": 1}, tenant="acme")
    outbox.publish(conn, "order.placed", {"n": 2})
    assert [e["tenant"] for e in assert_published(conn, "order.placed")] == ["acme", None]
    assert [e["payload"] for e in assert_published(conn, "order.placed", tenant="acme")] == [
        {"n": 1}]
    with pytest.raises(AssertionError, match="tenant='globex'"):
        assert_published(conn, "order.placed", tenant="globex")
    assert_published(conn, "order.placed", tenant="globex", count=0)
    conn.rollback()


def test_bounds_count_only_what_the_endpoint_takes(conn: Conn, dsn: str) -> None:
    """--max-pending and --max-pending-per-tenant at a tenant's endpoint count only the
    events routed to it: other tenants' events publish freely, its own stop at the bound."""
    _ok(dsn, "endpoints", "add", "acme-hook", "--url", "http://127.0.0.1:9/a",
        "--tenant", "acme", "--max-pending", "2", "--max-pending-per-tenant", "1")
    for _ in range(3):
        _publish(conn, "order.placed", "globex")
        _publish(conn, "order.placed", None)
    _publish(conn, "order.placed", "acme")
    with pytest.raises(outbox.BacklogFull, match="acme-hook"):
        outbox.publish(conn, "order.placed", {}, tenant="acme")
    conn.rollback()
    assert _routes(conn, _publish(conn, "order.placed", "globex")) == []
