"""Deliveries discarded by an endpoint's policy: --keep-dead discards old dead letters, the
state shows wherever a delivery's state shows, retention removes discarded rows as it
removes delivered ones, and a cold database's look sees a policy's work as due."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg

from outbox import admin, endpoints, history, retention
from outbox.sql import queries
from tests.support.admin import add_endpoint, age_event, publish, set_state
from tests.support.dispatcher import outbox_cli
from tests.support.web import command, web_client

Conn = psycopg.Connection[Any]
WHY = "discarded: the endpoint was disabled with drop (stop sending)"


def _state(conn: Conn, event_id: uuid.UUID, endpoint: str) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT d.state, d.last_error, now() - d.finished_at < interval '1 minute' "
        "FROM outbox.deliveries d JOIN outbox.endpoints e ON e.id = d.endpoint_id "
        "WHERE d.event_id = %s AND e.name = %s", (event_id, endpoint)).fetchone()
    conn.commit()
    assert row is not None
    return tuple(row)


def _discarded(conn: Conn, event_id: uuid.UUID, endpoint: str, ago: str = "0 seconds") -> None:
    set_state(conn, event_id, endpoint, "discarded", error=WHY, finished_ago=ago)


def test_dead_letters_older_than_keep_dead_are_discarded(conn: Conn) -> None:
    """--keep-dead 1h: the dead letter of two hours ago is discarded (finished now, its error
    kept after the why); the one of ten minutes ago stays, as do those of an endpoint
    without --keep-dead."""
    keeps = add_endpoint(conn, "keeps", "a.*")
    add_endpoint(conn, "forever", "b.*")
    endpoints.update(conn, "keeps", keep_dead="1h")
    conn.commit()
    old, recent, other = publish(conn, "a.x"), publish(conn, "a.y"), publish(conn, "b.z")
    set_state(conn, old, "keeps", "dead", error="HTTP 500", finished_ago="2 hours")
    set_state(conn, recent, "keeps", "dead", error="HTTP 500", finished_ago="10 minutes")
    set_state(conn, other, "forever", "dead", error="HTTP 500", finished_ago="30 days")
    rows = conn.execute(queries["expire_dead"], {"ids": [keeps], "batch_size": 10}).fetchall()
    conn.commit()
    assert rows == [(keeps, 1)]
    assert _state(conn, old, "keeps") == (
        "discarded", "discarded: a dead letter kept longer than the endpoint's keep_dead: "
        "HTTP 500", True)
    assert _state(conn, recent, "keeps")[0] == "dead"
    assert _state(conn, other, "forever")[0] == "dead"
    assert [d.event_id for d in admin.dead_letters(conn)] == [str(recent), str(other)]


def test_discarded_shows_in_show_events_list_and_the_delivery_log(conn: Conn, dsn: str) -> None:
    """`show` (text and --json), `events list --json` and outbox.delivery_log give the state
    discarded, with the why; `dead list` does not list it: it is not dead any more."""
    add_endpoint(conn, "hooks")
    event = publish(conn)
    _discarded(conn, event, "hooks")
    story = history.show(conn, event)
    assert [(d.state, d.last_error) for d in story.deliveries] == [("discarded", WHY)]
    text = outbox_cli(dsn, "show", str(event))
    assert text.returncode == 0, text.stderr
    assert "hooks: discarded, 3 attempts" in text.stdout
    assert f"last error: {WHY}" in text.stdout
    assert command(dsn, "show", str(event))["deliveries"][0]["state"] == "discarded"
    assert command(dsn, "events", "list")[0]["deliveries"] == {"hooks": "discarded"}
    assert command(dsn, "dead", "list") == []
    row = conn.execute("SELECT state, last_error, delivered_at FROM outbox.delivery_log "
                       "WHERE event_id = %s", (event,)).fetchone()
    assert row == ("discarded", WHY, None)


def test_the_web_view_shows_discarded(conn: Conn, dsn: str) -> None:
    """The event's page names the state discarded with its why; the endpoints page counts
    the discarded deliveries; its JSON (status --json's shape) gains no key."""
    add_endpoint(conn, "hooks")
    event = publish(conn)
    _discarded(conn, event, "hooks")
    with web_client(dsn) as client:
        page = client.get(f"/events/{event}")
        overview = client.get("/")
        doc = client.get("/?format=json").json()
    assert page.status_code == 200
    assert 'class="delivery state-discarded"' in page.text
    assert "hooks: discarded" in page.text
    assert WHY in page.text
    assert "<th class=\"n\">discarded</th>" in overview.text
    assert "discarded" not in doc["endpoints"][0]


def test_status_counts_discarded_in_its_table_only(conn: Conn, dsn: str) -> None:
    """`outbox status` shows a discarded column once something was discarded, and says what
    it means; `status --json` keeps its keys; a dropping endpoint's problem says so."""
    add_endpoint(conn, "hooks")
    _discarded(conn, publish(conn), "hooks")
    endpoints.disable(conn, "hooks", drop=True)
    conn.commit()
    shown = outbox_cli(dsn, "status")
    assert shown.returncode == 0, shown.stderr
    assert "DISCARDED" in shown.stdout.splitlines()[0]
    assert "discarded: deliveries the endpoint's policy dropped" in shown.stdout
    assert "endpoint hooks: disabled with --drop" in shown.stdout
    doc = command(dsn, "status")["endpoints"][0]
    assert "discarded" not in doc
    assert doc["problem"].startswith("disabled with --drop")


def test_retention_removes_discarded_rows_and_their_events(conn: Conn) -> None:
    """purge --older-than 7d deletes a discarded delivery finished 8 days ago and its event
    (counted first by --dry-run); a recent discarded one stays, with its event."""
    add_endpoint(conn, "hooks")
    old, recent = publish(conn), publish(conn)
    _discarded(conn, old, "hooks", ago="8 days")
    _discarded(conn, recent, "hooks")
    age_event(conn, old, days=8)
    conn.commit()
    assert retention.would_purge(conn, timedelta(days=7)) == retention.PurgeResult(1, 1)
    conn.commit()
    assert retention.purge(conn, timedelta(days=7)) == retention.PurgeResult(1, 1)
    rows = conn.execute("SELECT event_id, state FROM outbox.deliveries").fetchall()
    assert rows == [(recent, "discarded")]
    assert conn.execute("SELECT id FROM outbox.events").fetchall() == [(recent,)]


def test_a_cold_databases_look_sees_a_policys_work_as_due(conn: Conn) -> None:
    """database_due: nothing due at a disabled endpoint; due now once it drops its oldest past
    its bound, and at an endpoint disabled with --drop that has a pending delivery."""
    add_endpoint(conn, "hooks", enabled=False)
    for _ in range(3):
        publish(conn)

    def due() -> bool:
        next_due, _, now = conn.execute(queries["database_due"]).fetchone() or (None, 0, 0)
        conn.commit()
        return next_due is not None and next_due <= now

    assert not due()
    endpoints.update(conn, "hooks", max_pending=3, when_full="drop-oldest")
    conn.commit()
    assert not due()  # at its bound, not past it
    publish(conn)
    assert due()
    endpoints.update(conn, "hooks", max_pending=None, when_full="refuse")
    conn.commit()
    assert not due()
    endpoints.disable(conn, "hooks", drop=True)
    conn.commit()
    assert not due()  # what waited went at once
    publish(conn)
    assert due()
