"""`dead retry / list / discard` and `replay` with --type, --since, --until and --dry-run."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import psycopg
import pytest

from tests.support.admin import add_endpoint, age_event, count, deliveries, publish, set_state
from tests.support.cli import run_outbox

Conn = psycopg.Connection[Any]


def outbox(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_outbox(dsn, *args)


def snapshot(conn: Conn) -> list[tuple[Any, ...]]:
    """Every delivery's state and attempts: a dry run leaves it as it was."""
    rows = conn.execute("SELECT id, event_id, state, attempts FROM outbox.deliveries "
                        "ORDER BY id").fetchall()
    conn.commit()
    return rows


@pytest.fixture
def dead(conn: Conn) -> dict[str, uuid.UUID]:
    """Dead letters of two types at endpoint mail, one old; one of a removed endpoint."""
    add_endpoint(conn, "mail")
    add_endpoint(conn, "old")
    ids = {"received": publish(conn, "mail.received"), "sent": publish(conn, "mail.sent"),
           "bounced": publish(conn, "mail.bounced")}
    for event_id in ids.values():
        for endpoint in ("mail", "old"):
            set_state(conn, event_id, endpoint, "dead", error="HTTP 500", status=500)
    conn.execute("UPDATE outbox.deliveries SET state = 'delivered' FROM outbox.endpoints e "
                 "WHERE e.id = endpoint_id AND e.name = 'old' AND event_id <> %s",
                 (ids["received"],))
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE name = 'old'")
    conn.commit()
    ids["bounced"] = age_event(conn, ids["bounced"], days=3)
    return ids


def test_dead_retry_filters_and_dry_run(conn: Conn, dsn: str,
                                        dead: dict[str, uuid.UUID]) -> None:
    """--type and --since narrow the retry; --dry-run counts the same and changes nothing."""
    before = snapshot(conn)
    dry = outbox(dsn, "dead", "retry", "--endpoint", "mail", "--type", "mail.s*",
                 "--type", "mail.bounced", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "2 dead deliveries would be retried (dry run)\n")
    assert snapshot(conn) == before
    real = outbox(dsn, "dead", "retry", "--endpoint", "mail", "--type", "mail.s*",
                  "--type", "mail.bounced", "--since", "1d")
    assert (real.returncode, real.stdout) == (0, "1 dead delivery retried\n"), real.stderr
    assert deliveries(conn, dead["sent"])[0][1] == "pending"
    assert deliveries(conn, dead["bounced"])[0][1] == "dead"  # 3 days old
    assert deliveries(conn, dead["received"])[0][1] == "dead"  # another type
    until = outbox(dsn, "dead", "retry", "--all", "--until", "1d")
    assert until.stdout == "1 dead delivery retried\n"
    assert deliveries(conn, dead["bounced"])[0][1] == "pending"


def test_dead_retry_tells_what_it_skipped(conn: Conn, dsn: str,
                                          dead: dict[str, uuid.UUID]) -> None:
    """Dead letters of a removed endpoint are not retried, and standard error says so."""
    result = outbox(dsn, "dead", "retry", "--all", "--type", "mail.received")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1 dead delivery retried\n"
    assert result.stderr.splitlines() == [
        "skipped 1 dead letter of endpoint 'old': it was removed (replay their events to a "
        "live endpoint, or discard them)"]


def test_dead_list_filters_and_whole_last_error(conn: Conn, dsn: str,
                                                dead: dict[str, uuid.UUID]) -> None:
    """dead list takes the same filters; --json gives last_error whole, however long."""
    long_error = "HTTP 500: " + "x" * 400
    conn.execute("UPDATE outbox.deliveries SET last_error = %s WHERE event_id = %s",
                 (long_error, dead["sent"]))
    conn.commit()
    listed = json.loads(outbox(dsn, "dead", "list", "--type", "mail.se?t", "--json").stdout)
    assert [(d["event_id"], d["last_error"]) for d in listed] == [(str(dead["sent"]),
                                                                    long_error)]
    recent = json.loads(outbox(dsn, "dead", "list", "--endpoint", "mail", "--since", "1d",
                               "--json").stdout)
    assert {d["event_id"] for d in recent} == {str(dead["received"]), str(dead["sent"])}


def test_dead_discard(conn: Conn, dsn: str, dead: dict[str, uuid.UUID]) -> None:
    """discard --dry-run counts; discard deletes those dead letters (a removed endpoint's too)."""
    total = count(conn, "deliveries")
    dry = outbox(dsn, "dead", "discard", "--endpoint", "old", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, "1 dead delivery would be discarded (dry run)\n")
    assert count(conn, "deliveries") == total
    real = outbox(dsn, "dead", "discard", "--endpoint", "old")
    assert (real.returncode, real.stdout) == (0, "1 dead delivery discarded\n")
    assert count(conn, "deliveries") == total - 1
    assert outbox(dsn, "dead", "discard", "--endpoint", "never").returncode == 1
    assert outbox(dsn, "dead", "discard").returncode == 2  # a selector is required


def test_replay_filters_and_dry_run(conn: Conn, dsn: str) -> None:
    """replay --since with --until and --type picks those events; --dry-run only counts."""
    add_endpoint(conn, "mail")
    fresh = [publish(conn, "mail.received"), publish(conn, "order.created")]
    old = age_event(conn, publish(conn, "mail.received"), days=3)
    conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now()")
    conn.commit()
    before = snapshot(conn)
    dry = outbox(dsn, "replay", "--endpoint", "mail", "--since", "7d", "--type", "mail.*",
                 "--dry-run")
    assert (dry.returncode, dry.stdout) == (
        0, "2 events would be replayed (dry run) to endpoint 'mail'\n"), dry.stderr
    assert snapshot(conn) == before
    real = outbox(dsn, "replay", "--endpoint", "mail", "--since", "7d", "--until", "1d",
                  "--type", "mail.*")
    assert (real.returncode, real.stdout) == (0, "1 event replayed to endpoint 'mail'\n")
    assert [d[1] for d in deliveries(conn, old)] == ["delivered", "pending"]
    assert len(deliveries(conn, fresh[0])) == 1
    by_id = outbox(dsn, "replay", "--endpoint", "mail", "--event-id", str(fresh[0]),
                   str(fresh[1]), "--type", "order.*")
    assert by_id.stdout == "1 event replayed to endpoint 'mail'\n"
    assert [d[1] for d in deliveries(conn, fresh[1])] == ["delivered", "pending"]


@pytest.mark.parametrize("args", [
    ("dead", "list", "--limit", "99999999999999999999999"),
    ("replay", "--endpoint", "mail", "--since", "99999999d"),
    ("replay", "--endpoint", "mail", "--since", "1d", "--type", "mail..x"),
    ("replay", "--endpoint", "mail", "--event-id", str(uuid.UUID(int=1)), "--until", "1d"),
    ("dead", "retry", "--all", "--since", "yesterday-ish"),
    ("show", "42"),
])
def test_bad_values_are_usage_errors(dsn: str, args: tuple[str, ...]) -> None:
    """Numbers beyond range, times before year 1, bad patterns: exit 2, one line, no database."""
    result = outbox(dsn, *args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [
    ("dead", "list", "--since", "1h", "--until", "2h"),
    ("dead", "retry", "--all", "--since", "2026-12-02T10:00:00Z",
     "--until", "2026-12-02T10:00:00Z"),
    ("events", "list", "--since", "1d", "--until", "2d"),
    ("replay", "--endpoint", "mail", "--since", "1h", "--until", "1d"),
])
def test_an_empty_time_window_is_a_usage_error(conn: Conn, dsn: str,
                                               args: tuple[str, ...]) -> None:
    """--until not after --since holds nothing: said in one line (exit 2), not `(none)`."""
    add_endpoint(conn, "mail")
    result = outbox(dsn, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "the window is empty" in line
    assert result.stdout == ""
