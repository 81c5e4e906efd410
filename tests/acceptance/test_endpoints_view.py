"""`outbox endpoints sync --dry-run / show / update / list`: looking before leaping."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg

import outbox
from outbox.endpoints import EndpointSpec
from outbox.endpoints import _store as store
from tests.support.cli import run_outbox

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
URL = "https://hooks.example.com/events"


def cmd(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_outbox(dsn, "endpoints", *args)


def snapshot(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT * FROM outbox.endpoints ORDER BY id").fetchall()


def add(dsn: str, name: str, **options: Any) -> None:
    options.setdefault("url", URL)
    with psycopg.connect(dsn) as conn:
        store.add_endpoint(conn, EndpointSpec(name=name, **options))


def test_sync_dry_run_prints_the_plan_and_changes_nothing(dsn: str, tmp_path: Path) -> None:
    """Added, changed (with the options), removed with what a forced removal dead-letters."""
    add(dsn, "kept", max_attempts=3)
    add(dsn, "busy")
    add(dsn, "idle", events=("order.*",))
    with psycopg.connect(dsn) as conn:
        outbox.publish(conn, "mail.received", {"n": 1})
    path = tmp_path / "endpoints.toml"
    path.write_text(f'[endpoints.kept]\nurl = "{URL}"\nmax_attempts = 5\ntimeout = 3\n'
                    f'[endpoints.new]\nurl = "{URL}"\n')
    before = snapshot(dsn)
    plan = cmd(dsn, "sync", str(path), "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines() == [
        "would add new",
        "would change kept: max_attempts, timeout",
        "would remove busy: it has 1 undelivered delivery, refused without --force "
        "(forced, they become dead letters)",
        "would remove idle",
        "sync --dry-run: 1 to add, 1 to change, 2 to remove, 0 unchanged; nothing changed"]
    forced = cmd(dsn, "sync", str(path), "--dry-run", "--force")
    assert "would remove busy and dead-letter its 1 undelivered delivery" in forced.stdout
    assert snapshot(dsn) == before


def test_show_gives_every_option_and_only_the_secret_kind(dsn: str) -> None:
    """show NAME: every option, the secret as its kind, header values hidden."""
    add(dsn, "hooks", secret=SECRET, rate_limit=5.0, headers={"Authorization": "Bearer x"})
    shown = cmd(dsn, "show", "hooks", "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["signing"] == "whsec"
    assert (doc["rate_limit"], doc["headers"]) == (5.0, {"authorization": "(hidden)"})
    assert {"max_attempts", "timeout", "min_backoff", "max_backoff", "max_in_flight",
            "max_batch", "format", "breaker_failures", "breaker_cooldown", "breaker_window",
            "breaker_rate", "max_pending", "events", "url", "enabled"} <= set(doc)
    text = cmd(dsn, "show", "hooks")
    assert SECRET not in text.stdout + shown.stdout
    assert "Bearer" not in text.stdout + shown.stdout
    assert any(line.startswith("rate limit") for line in text.stdout.splitlines())
    missing = cmd(dsn, "show", "nope")
    assert missing.returncode == 1
    assert len(missing.stderr.strip().splitlines()) == 1


def test_update_changes_options_in_place(dsn: str) -> None:
    """update NAME --option: that option changes, the others and the id stay; --unset resets."""
    add(dsn, "hooks", max_attempts=3, rate_limit=5.0, secret=SECRET)
    [before] = snapshot(dsn)
    changed = cmd(dsn, "update", "hooks", "--max-attempts", "7", "--unset", "rate-limit")
    assert (changed.returncode, changed.stdout) == (
        0, "updated endpoint hooks: max_attempts, rate_limit\n"), changed.stderr
    with psycopg.connect(dsn, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute("SELECT * FROM outbox.endpoints WHERE name = 'hooks'").fetchone()
    assert row is not None
    assert (row["id"], row["max_attempts"], row["rate_limit"], row["secret"], row["url"]) == (
        before[0], 7, None, SECRET, URL)
    same = cmd(dsn, "update", "hooks", "--max-attempts", "7")
    assert same.stdout == "endpoint hooks unchanged: its options were already so\n"
    bad = cmd(dsn, "update", "hooks", "--min-backoff", "900", "--max-backoff", "1")
    assert bad.returncode == 2
    assert "--min-backoff" in bad.stderr
    assert cmd(dsn, "update", "nope", "--max-attempts", "2").returncode == 1


def test_list_shows_the_limits(dsn: str) -> None:
    """The table has the limits columns the operations guide promises."""
    add(dsn, "hooks", max_in_flight=4, rate_limit=2.5, max_batch=10, max_pending=1000)
    table = cmd(dsn, "list")
    header, row = table.stdout.splitlines()[:2]
    for column in ("IN FLIGHT", "RATE", "BATCH", "MAX PENDING", "ATTEMPTS"):
        assert column in header
    assert "2.5/s" in row
    assert "1000" in row
