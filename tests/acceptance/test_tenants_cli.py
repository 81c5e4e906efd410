"""`--tenant` on dead list / retry / discard, replay and events list, and the tenant in show."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import psycopg
import pytest

import outbox
from tests.support.admin import add_endpoint, deliveries, set_state, snapshot
from tests.support.cli import run_outbox

Conn = psycopg.Connection[Any]


def cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_outbox(dsn, *args)


def publish(conn: Conn, event_type: str, tenant: str | None) -> uuid.UUID:
    """One event of that tenant (None: none), committed."""
    event_id = outbox.publish(conn, event_type, {"n": 1}, tenant=tenant)
    conn.commit()
    return event_id


@pytest.fixture
def tenants(conn: Conn) -> dict[str, uuid.UUID]:
    """Events of tenants A and B and one without, each dead at endpoint mail."""
    add_endpoint(conn, "mail")
    ids = {"A": publish(conn, "mail.received", "A"), "B": publish(conn, "mail.received", "B"),
           "none": publish(conn, "mail.received", None)}
    for event_id in ids.values():
        set_state(conn, event_id, "mail", "dead", error="HTTP 500", status=500)
    return ids


def test_dead_list_filters_by_tenant_and_shows_it(dsn: str,
                                                  tenants: dict[str, uuid.UUID]) -> None:
    """dead list --tenant lists only that tenant's, and --json carries each one's tenant."""
    result = cli(dsn, "dead", "list", "--tenant", "A", "--json")
    assert result.returncode == 0, result.stderr
    assert [(d["event_id"], d["tenant"]) for d in json.loads(result.stdout)] == [
        (str(tenants["A"]), "A")]
    every = json.loads(cli(dsn, "dead", "list", "--json").stdout)
    assert {d["event_id"]: d["tenant"] for d in every} == {
        str(tenants["A"]): "A", str(tenants["B"]): "B", str(tenants["none"]): None}


def test_dead_list_table_has_a_tenant_column(dsn: str, tenants: dict[str, uuid.UUID]) -> None:
    """dead list's table has a TENANT column, each dead letter's tenant in it (empty for
    an event without one)."""
    result = cli(dsn, "dead", "list")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    columns = header.split()
    assert columns[columns.index("KEY") + 1] == "TENANT"
    start = header.index("TENANT")
    found = {row.split()[3]: row[start:].split(" ", 1)[0] for row in rows}
    assert found == {str(tenants["A"]): "A", str(tenants["B"]): "B",
                     str(tenants["none"]): ""}


def test_dead_retry_and_discard_touch_only_that_tenant(conn: Conn, dsn: str,
                                                       tenants: dict[str, uuid.UUID]) -> None:
    """dead retry --tenant revives only that tenant's; dead discard --tenant drops only its."""
    retried = cli(dsn, "dead", "retry", "--all", "--tenant", "A")
    assert (retried.returncode, retried.stdout) == (0, "1 dead delivery retried\n"), \
        retried.stderr
    assert {name: deliveries(conn, event_id)[0][1] for name, event_id in tenants.items()} == {
        "A": "pending", "B": "dead", "none": "dead"}
    discarded = cli(dsn, "dead", "discard", "--endpoint", "mail", "--tenant", "B")
    assert (discarded.returncode, discarded.stdout) == (0, "1 dead delivery discarded\n")
    assert deliveries(conn, tenants["B"]) == []
    assert deliveries(conn, tenants["none"])[0][1] == "dead"


def test_replay_replays_only_that_tenants_events(conn: Conn, dsn: str,
                                                 tenants: dict[str, uuid.UUID]) -> None:
    """replay --tenant puts back only that tenant's events, by --since and by --event-id."""
    conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now()")
    conn.commit()
    result = cli(dsn, "replay", "--endpoint", "mail", "--since", "1h", "--tenant", "A")
    assert (result.returncode, result.stdout) == (
        0, "1 event replayed to endpoint 'mail'\n"), result.stderr
    assert [d[1] for d in deliveries(conn, tenants["A"])] == ["delivered", "pending"]
    assert [d[1] for d in deliveries(conn, tenants["B"])] == ["delivered"]
    assert [d[1] for d in deliveries(conn, tenants["none"])] == ["delivered"]
    by_id = cli(dsn, "replay", "--endpoint", "mail", "--tenant", "B",
                "--event-id", str(tenants["B"]), str(tenants["none"]))
    assert by_id.stdout == "1 event replayed to endpoint 'mail'\n", by_id.stderr
    assert [d[1] for d in deliveries(conn, tenants["none"])] == ["delivered"]


def test_events_list_filters_by_tenant_and_shows_it(dsn: str,
                                                    tenants: dict[str, uuid.UUID]) -> None:
    """events list --tenant keeps that tenant's; --json has "tenant" in its place; the
    table has a tenant column."""
    result = cli(dsn, "events", "list", "--tenant", "A", "--json")
    assert result.returncode == 0, result.stderr
    [only] = json.loads(result.stdout)
    assert list(only) == ["event_id", "type", "key", "tenant", "created_at", "deliveries"]
    assert (only["event_id"], only["tenant"]) == (str(tenants["A"]), "A")
    every = json.loads(cli(dsn, "events", "list", "--json").stdout)
    assert {e["event_id"]: e["tenant"] for e in every} == {
        str(tenants["A"]): "A", str(tenants["B"]): "B", str(tenants["none"]): None}
    table = cli(dsn, "events", "list", "--tenant", "B").stdout.splitlines()
    assert table[0].split() == ["PUBLISHED", "EVENT", "ID", "TYPE", "KEY", "TENANT",
                                "DELIVERIES"]
    at = table[0].index("TENANT")
    assert [(line.split()[1], line[at:].split()[0]) for line in table[1:]] == [
        (str(tenants["B"]), "B")]


def test_show_tells_the_events_tenant(dsn: str, tenants: dict[str, uuid.UUID]) -> None:
    """show --json carries the event's tenant (null without one); the text names it."""
    shown = cli(dsn, "show", str(tenants["A"]), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tenant"] == "A"
    assert json.loads(cli(dsn, "show", str(tenants["none"]), "--json").stdout)["tenant"] is None
    text = cli(dsn, "show", str(tenants["A"]), "--payload").stdout.splitlines()
    assert text[3] == "  tenant     A"
    assert text[5].startswith("  trace ")
    assert text[6] == "  payload"
    assert "tenant" not in cli(dsn, "show", str(tenants["none"])).stdout


@pytest.mark.parametrize("bad", ["x" * 201, "a\tb", "", "caf\u00e9"])
@pytest.mark.parametrize("command", [
    ("dead", "list"),
    ("dead", "retry", "--all"),
    ("dead", "discard", "--all"),
    ("replay", "--endpoint", "mail", "--since", "1h"),
    ("events", "list"),
])
def test_a_bad_tenant_is_a_usage_error(conn: Conn, dsn: str, tenants: dict[str, uuid.UUID],
                                       command: tuple[str, ...], bad: str) -> None:
    """A --tenant that publish would refuse exits 2 in one line and changes nothing."""
    before = snapshot(conn)
    result = cli(dsn, *command, "--tenant", bad)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "argument --tenant: invalid tenant" in line
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert snapshot(conn) == before


def test_status_tenants_lists_the_largest_backlogs_per_endpoint(conn: Conn, dsn: str) -> None:
    """`status --tenants`: per endpoint, tenants by backlog (largest first, at most five),
    pending and in flight, in the table and as the JSON "tenants" list; without the
    option, no such list."""
    add_endpoint(conn, "mail")
    for tenant, count in (("big", 4), ("small", 1), *((f"t{n}", 2) for n in range(5))):
        outbox.publish_many(conn, [outbox.Event("mail.received", {}, tenant=tenant)
                                   for _ in range(count)])
    outbox.publish(conn, "mail.received", {})  # no tenant: not a tenant's backlog
    conn.commit()
    shown = cli(dsn, "status", "--tenants", "--json")
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)["tenants"]
    assert [t["tenant"] for t in listed] == ["big", "t0", "t1", "t2", "t3"]
    assert listed[0] == {"endpoint": "mail", "tenant": "big", "pending": 4, "in_flight": 0,
                         "oldest_pending_seconds": listed[0]["oldest_pending_seconds"]}
    assert listed[0]["oldest_pending_seconds"] >= 0
    table = cli(dsn, "status", "--tenants")
    assert table.returncode == 0, table.stderr
    assert "TENANT" in table.stdout
    assert "big" in table.stdout
    plain = cli(dsn, "status", "--json")
    assert "tenants" not in json.loads(plain.stdout)
