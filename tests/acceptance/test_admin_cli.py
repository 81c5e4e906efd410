"""`outbox status / dead / replay / purge` as an operator runs them: real subprocesses."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.admin import (
    add_endpoint,
    age_event,
    count,
    deliveries,
    publish,
    set_state,
    snapshot,
    unrouted,
)
from tests.support.cli import run_outbox

Conn = psycopg.Connection[Any]
_CONTRACT_STATUS_KEYS = {"name", "pending", "in_flight", "delivered", "dead",
                         "oldest_pending_seconds"}
_CONTRACT_DEAD_KEYS = {"event_id", "endpoint", "type", "key", "attempts", "last_error",
                       "last_status", "failed_at"}


def outbox(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `outbox ARGS` against the test database (found through OUTBOX_DSN)."""
    return run_outbox(dsn, *args)


@pytest.fixture
def scene(conn: Conn) -> dict[str, uuid.UUID]:
    """Two endpoints, and events delivered, dead, pending and unrouted."""
    add_endpoint(conn, "mail", "mail.*")
    add_endpoint(conn, "orders", "order.*")
    ids = {
        "delivered": publish(conn, "mail.received", key="t1"),
        "dead": publish(conn, "mail.received", key="t2"),
        "pending": publish(conn, "mail.received"),
        "order_dead": publish(conn, "order.created"),
        "unrouted": publish(conn, "nobody.listens"),
    }
    set_state(conn, ids["delivered"], "mail", "delivered")
    set_state(conn, ids["dead"], "mail", "dead", error="HTTP 500 from receiver", status=500,
              finished_ago="1 minute")
    set_state(conn, ids["order_dead"], "orders", "dead", error="connection refused")
    return ids


def test_status_table_and_json(dsn: str, scene: dict[str, uuid.UUID]) -> None:
    """status prints a table, and --json the documented shape with the right counts."""
    table = outbox(dsn, "status")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:4] == ["ENDPOINT", "STATE", "CIRCUIT", "PENDING"]
    assert "BOUND" in table.stdout.splitlines()[0]
    assert "unrouted events: 1" in table.stdout
    assert "delivered: the deliveries retention still keeps" in table.stdout

    result = outbox(dsn, "status", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) >= {"endpoints", "unrouted"}
    assert doc["unrouted"] == 1
    by_name = {e["name"]: e for e in doc["endpoints"]}
    assert all(set(e) >= _CONTRACT_STATUS_KEYS for e in doc["endpoints"])
    mail = by_name["mail"]
    assert (mail["pending"], mail["in_flight"], mail["delivered"], mail["dead"]) == (1, 0, 1, 1)
    assert mail["oldest_pending_seconds"] >= 0
    assert mail["enabled"] is True
    assert mail["circuit"] == "closed"
    assert mail["max_pending"] is None
    assert by_name["orders"]["oldest_pending_seconds"] == 0


def test_dead_list_json_and_table(dsn: str, scene: dict[str, uuid.UUID]) -> None:
    """dead list --json gives the documented objects newest first; the table shows the same."""
    result = outbox(dsn, "dead", "list", "--json")
    assert result.returncode == 0, result.stderr
    letters = json.loads(result.stdout)
    assert [d["event_id"] for d in letters] == [str(scene["order_dead"]), str(scene["dead"])]
    assert all(set(d) == {*_CONTRACT_DEAD_KEYS, "created_at", "tenant"} for d in letters)
    mail = letters[1]
    assert (mail["endpoint"], mail["type"], mail["key"], mail["attempts"], mail["last_status"],
            mail["last_error"]) == ("mail", "mail.received", "t2", 3, 500,
                                    "HTTP 500 from receiver")
    assert datetime.fromisoformat(mail["failed_at"]).tzinfo is not None

    only = json.loads(outbox(dsn, "dead", "list", "--endpoint", "orders", "--json").stdout)
    assert [d["event_id"] for d in only] == [str(scene["order_dead"])]
    assert len(json.loads(outbox(dsn, "dead", "list", "--limit", "1", "--json").stdout)) == 1

    table = outbox(dsn, "dead", "list")
    assert table.returncode == 0
    assert str(scene["dead"]) in table.stdout
    assert table.stdout.splitlines()[0].startswith("FAILED AT")
    assert "PUBLISHED" in table.stdout.splitlines()[0]
    assert outbox(dsn, "dead", "list", "--endpoint", "never").returncode == 1


def test_dead_list_failed_since_bounds_when_it_died_not_when_it_was_published(
        conn: Conn, dsn: str, scene: dict[str, uuid.UUID]) -> None:
    """--failed-since keeps the deliveries dead-lettered since then, however old their
    events; --since still bounds the publish time; both times are shown."""
    old = str(age_event(conn, scene["dead"], days=3))  # published long ago, died a minute ago
    conn.execute("UPDATE outbox.deliveries SET finished_at = now() - interval '2 hours' "
                 "WHERE event_id = %s", (scene["order_dead"],))
    conn.commit()

    def listed(*options: str) -> list[str]:
        result = outbox(dsn, "dead", "list", "--json", *options)
        assert result.returncode == 0, result.stderr
        return [d["event_id"] for d in json.loads(result.stdout)]

    assert listed("--failed-since", "1h") == [old]
    assert listed("--since", "1h") == [str(scene["order_dead"])]
    [dead] = [d for d in json.loads(outbox(dsn, "dead", "list", "--json").stdout)
              if d["event_id"] == old]
    assert datetime.fromisoformat(dead["failed_at"]) - datetime.fromisoformat(
        dead["created_at"]) > timedelta(days=2)
    bare = outbox(dsn, "dead", "list", "--since", "2026")
    assert bare.returncode == 2
    assert "a bare number is ambiguous" in bare.stderr


def test_dead_retry_by_event_id(conn: Conn, dsn: str, scene: dict[str, uuid.UUID]) -> None:
    """dead retry --event-id revives that event's dead delivery only."""
    result = outbox(dsn, "dead", "retry", "--event-id", str(scene["dead"]))
    assert (result.returncode, result.stdout.strip()) == (0, "1 dead delivery retried")
    assert deliveries(conn, scene["dead"]) == [("mail", "pending", 0, "HTTP 500 from receiver")]
    assert deliveries(conn, scene["order_dead"])[0][1] == "dead"


def test_dead_retry_by_endpoint(conn: Conn, dsn: str, scene: dict[str, uuid.UUID]) -> None:
    """dead retry --endpoint revives that endpoint's dead deliveries only."""
    result = outbox(dsn, "dead", "retry", "--endpoint", "orders")
    assert (result.returncode, result.stdout.strip()) == (0, "1 dead delivery retried")
    assert deliveries(conn, scene["order_dead"])[0][1] == "pending"
    assert deliveries(conn, scene["dead"])[0][1] == "dead"


def test_dead_retry_all_then_nothing_left(conn: Conn, dsn: str,
                                          scene: dict[str, uuid.UUID]) -> None:
    """dead retry --all revives every dead delivery; run again it retries none, exit 0."""
    result = outbox(dsn, "dead", "retry", "--all")
    assert (result.returncode, result.stdout.strip()) == (0, "2 dead deliveries retried")
    again = outbox(dsn, "dead", "retry", "--all")
    assert (again.returncode, again.stdout.strip()) == (0, "0 dead deliveries retried")
    assert json.loads(outbox(dsn, "dead", "list", "--json").stdout) == []


@pytest.mark.parametrize("args", [
    ("dead", "retry"),
    ("dead", "retry", "--all", "--endpoint", "mail"),
    ("dead", "retry", "--event-id", "not-a-uuid"),
    ("dead", "list", "--limit", "0"),
    ("dead", "list", "--since", "2026"),
    ("dead", "list", "--failed-since", "20261201"),
    ("replay", "--endpoint", "mail", "--since", "3600"),
    ("replay", "--endpoint", "mail"),
    ("replay", "--endpoint", "mail", "--since", "yesterday-ish"),
    ("replay", "--endpoint", "mail", "--event-id", "42"),
    ("replay", "--endpoint", "mail", "--since", "2h", "--event-id", str(uuid.UUID(int=1))),
    ("purge", "--older-than", "seven days"),
    ("purge", "--older-than", "-1d"),
    ("purge", "--older-than", "0"),
    ("purge", "--older-than", "500ms"),
    ("purge", "--older-than", "0", "--dry-run"),
    ("purge",),
])
def test_bad_usage_exits_2_and_changes_nothing(conn: Conn, dsn: str,
                                               scene: dict[str, uuid.UUID],
                                               args: tuple[str, ...]) -> None:
    """Malformed or missing selectors, UUIDs, timestamps and durations: exit 2, nothing changed."""
    before = snapshot(conn)
    result = outbox(dsn, *args)
    assert result.returncode == 2, result.stderr
    assert "error" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(conn) == before


@pytest.mark.parametrize("args", [
    ("dead", "retry", "--endpoint", "never"),
    ("replay", "--endpoint", "never", "--since", "1h"),
    ("replay", "--endpoint", "mail", "--event-id", str(uuid.UUID(int=1))),
])
def test_unknown_names_exit_1_and_change_nothing(conn: Conn, dsn: str,
                                                 scene: dict[str, uuid.UUID],
                                                 args: tuple[str, ...]) -> None:
    """An endpoint or event that does not exist is a run-time failure: exit 1, one line."""
    before = snapshot(conn)
    result = outbox(dsn, *args)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert snapshot(conn) == before


def test_replay_delivered_and_unrouted_events(conn: Conn, dsn: str,
                                              scene: dict[str, uuid.UUID]) -> None:
    """replay --event-id queues a delivered and an unrouted event again; skips a pending one."""
    result = outbox(dsn, "replay", "--endpoint", "mail", "--event-id", str(scene["delivered"]),
                    str(scene["unrouted"]), "--event-id", str(scene["pending"]))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "2 events replayed to endpoint 'mail' (1 skipped: already pending or in flight there)"]
    assert [d[1] for d in deliveries(conn, scene["delivered"])] == ["delivered", "pending"]
    assert deliveries(conn, scene["unrouted"]) == [("mail", "pending", 0, None)]
    assert not unrouted(conn, scene["unrouted"])
    assert len(deliveries(conn, scene["pending"])) == 1


def test_replay_since_to_a_disabled_endpoint(conn: Conn, dsn: str,
                                             scene: dict[str, uuid.UUID]) -> None:
    """replay --since DURATION picks recent events only and warns that the endpoint is off."""
    old = age_event(conn, scene["delivered"], days=3)
    conn.execute("UPDATE outbox.endpoints SET enabled = false WHERE name = 'orders'")
    conn.commit()
    result = outbox(dsn, "replay", "--endpoint", "orders", "--since", "1d")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["4 events replayed to endpoint 'orders'"]
    assert result.stderr.splitlines() == [
        "endpoint 'orders' is disabled: the deliveries wait until it is enabled"]
    assert [d[0] for d in deliveries(conn, old)] == ["mail"]
    stamp = outbox(dsn, "replay", "--endpoint", "orders", "--since", "2000-01-01T00:00:00")
    assert stamp.returncode == 0, stamp.stderr
    assert stamp.stdout.splitlines()[0] == (
        "1 event replayed to endpoint 'orders' (4 skipped: already pending or in flight there)")
    assert [d[0] for d in deliveries(conn, old)] == ["mail", "orders"]


def test_purge_deletes_old_delivered_and_keeps_dead_and_pending(
        conn: Conn, dsn: str, scene: dict[str, uuid.UUID]) -> None:
    """purge removes old delivered deliveries and old unrouted events; dead and pending stay."""
    set_state(conn, scene["delivered"], "mail", "delivered", finished_ago="8 days")
    set_state(conn, scene["dead"], "mail", "dead", finished_ago="8 days")
    aged = {name: age_event(conn, event, days=8) for name, event in scene.items()}
    result = outbox(dsn, "purge", "--older-than", "7d")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("purged 1 delivered or discarded delivery, 2 events and 0 "
                                     "inbox records")
    assert count(conn, "events") == 3
    assert [d[1] for d in deliveries(conn, aged["dead"])] == ["dead"]
    assert [d[1] for d in deliveries(conn, aged["pending"])] == ["pending"]
    again = outbox(dsn, "purge", "--older-than", "7d")
    assert again.stdout.strip() == ("purged 0 delivered or discarded deliveries, 0 events and 0 "
                                    "inbox records")


def test_purge_dry_run_counts_what_purge_then_deletes_and_deletes_nothing(
        conn: Conn, dsn: str, scene: dict[str, uuid.UUID]) -> None:
    """purge --dry-run prints the counts the purge itself then reports, and changes
    nothing; a duration under a second is refused with one line (exit 2)."""
    set_state(conn, scene["delivered"], "mail", "delivered", finished_ago="8 days")
    set_state(conn, scene["dead"], "mail", "dead", finished_ago="8 days")
    for event in scene.values():
        age_event(conn, event, days=8)
    before = snapshot(conn)
    dry = outbox(dsn, "purge", "--older-than", "7d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip() == ("would purge 1 delivered or discarded delivery, 2 events and 0 "
                                  "inbox records")
    assert snapshot(conn) == before
    zero = outbox(dsn, "purge", "--older-than", "0")
    assert zero.returncode == 2
    assert len(zero.stderr.strip().splitlines()) == 1, zero.stderr
    assert "'0' is under one second: purge keeps at least the last second (to delete " \
        "nearly everything, say so with a duration such as 1s)" in zero.stderr
    assert snapshot(conn) == before
    done = outbox(dsn, "purge", "--older-than", "7d")
    assert done.stdout.strip() == ("purged 1 delivered or discarded delivery, 2 events and 0 "
                                   "inbox records")


def test_unreachable_database_is_exit_1_in_one_line(tmp_path: Path) -> None:
    """A database that cannot be reached: exit 1 and a single line, for every command."""
    dead_dsn = f"postgresql:///outbox?host={tmp_path}&port=1&connect_timeout=2"
    for args in (("status",), ("dead", "list"), ("dead", "retry", "--all"),
                 ("replay", "--endpoint", "x", "--since", "1h"), ("purge", "--older-than", "1d")):
        result = outbox(dead_dsn, *args)
        assert result.returncode == 1, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
