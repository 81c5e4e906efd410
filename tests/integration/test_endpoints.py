"""Endpoint operations on a real PostgreSQL: stored values, routing, removal, rotation, sync."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import outbox
from outbox.endpoints import EndpointSpec
from outbox.endpoints import _store as store
from outbox.errors import EndpointBusy, EndpointExists, EndpointNotFound

URL = "https://hooks.example.com/events"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
Conn = psycopg.Connection[Any]


def add(conn: Conn, name: str, **options: Any) -> int:
    options.setdefault("url", URL)
    endpoint_id = store.add_endpoint(conn, EndpointSpec(name=name, **options))
    conn.commit()
    return endpoint_id


def row(conn: Conn, name: str) -> dict[str, Any]:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    found = cur.execute("SELECT * FROM outbox.endpoints WHERE name = %s AND removed_at IS NULL",
                        (name,)).fetchone()
    assert found is not None
    return found


def publish(conn: Conn, *types: str) -> None:
    for event_type in types:
        outbox.publish(conn, event_type, {"n": 1})
    conn.commit()


def states(conn: Conn, endpoint_id: int) -> list[tuple[str, str | None]]:
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT state, last_error FROM outbox.deliveries WHERE endpoint_id = %s ORDER BY id",
        (endpoint_id,))]


def test_add_stores_every_option(conn: Conn) -> None:
    """An added endpoint's row holds each option, the globs and their LIKE forms."""
    add(conn, "hooks", events=["mail.*", "a_b"], secret=SECRET, max_attempts=3, timeout=2.5,
        min_backoff=0.5, max_backoff=30, max_in_flight=2, rate_limit=5, max_batch=10,
        format="cloudevents", headers={"X-Tenant": "acme"})
    r = row(conn, "hooks")
    assert r["events"] == ["mail.*", "a_b"]
    assert r["events_like"] == ["mail.%", "a\\_b"]
    assert (r["secret"], r["max_attempts"], r["timeout_seconds"]) == (SECRET, 3, 2.5)
    assert (r["min_backoff_seconds"], r["max_backoff_seconds"]) == (0.5, 30)
    assert (r["max_in_flight"], r["rate_limit"], r["max_batch"]) == (2, 5, 10)
    assert r["format"] == "cloudevents"
    assert r["headers"] == {"x-tenant": "acme"}
    assert r["enabled"]
    assert r["previous_secrets"] == []


def test_defaults_equal_the_table_defaults(conn: Conn) -> None:
    """A spec with no options stores the same values as an insert naming no columns."""
    add(conn, "spec")
    conn.execute("INSERT INTO outbox.endpoints (name, url) VALUES ('raw', %s)", (URL,))
    listed = {e.name: e.columns for e in store.list_endpoints(conn)}
    assert {k: v for k, v in listed["spec"].items() if k != "name"} == \
        {k: v for k, v in listed["raw"].items() if k != "name"}


def test_add_existing_name_refused_and_re_add_after_remove(conn: Conn) -> None:
    """A live name cannot be added twice; once removed, the name is free again."""
    add(conn, "hooks")
    with pytest.raises(EndpointExists):
        store.add_endpoint(conn, EndpointSpec(name="hooks", url=URL))
    conn.rollback()
    store.remove_endpoint(conn, "hooks", force=False)
    conn.commit()
    add(conn, "hooks", url="https://new.example.com/")
    assert row(conn, "hooks")["url"] == "https://new.example.com/"


@pytest.mark.parametrize(("pattern", "matches", "misses"), [
    ("*", ["a", "mail.received", "x_y.z"], []),
    ("mail.*", ["mail.received", "mail.received.v2"], ["mail", "mailx.sent", "email.sent"]),
    ("order.created", ["order.created"], ["order.createdx", "order.create", "Order.created"]),
    ("a_b.*", ["a_b.c"], ["axb.c", "a-b.c"]),
    ("a?c", ["abc", "a_c"], ["ac", "abbc"]),
    ("*.created", ["order.created", "a.b.created"], ["created", "order.created.v2"]),
])
def test_publish_routes_as_the_glob_says(conn: Conn, pattern: str, matches: list[str],
                                         misses: list[str]) -> None:
    """The stored LIKE patterns route exactly the event types the glob matches."""
    endpoint_id = add(conn, "hooks", events=[pattern])
    publish(conn, *matches, *misses)
    routed = [r[0] for r in conn.execute(
        "SELECT e.type FROM outbox.deliveries d JOIN outbox.events e ON e.id = d.event_id "
        "WHERE d.endpoint_id = %s ORDER BY e.seq", (endpoint_id,))]
    assert routed == matches


def test_disable_and_enable(conn: Conn) -> None:
    """Disabling records a reason and pauses (new events still wait for it); enabling clears it."""
    endpoint_id = add(conn, "hooks")
    store.set_enabled(conn, "hooks", enabled=False, reason="by hand")
    conn.commit()
    assert (row(conn, "hooks")["enabled"], row(conn, "hooks")["disabled_reason"]) == \
        (False, "by hand")
    publish(conn, "mail.received")
    assert states(conn, endpoint_id) == [("pending", None)]
    store.set_enabled(conn, "hooks", enabled=True)
    conn.commit()
    assert (row(conn, "hooks")["enabled"], row(conn, "hooks")["disabled_reason"]) == (True, None)


@pytest.mark.parametrize("operation", ["enable", "disable", "remove", "rotate"])
def test_unknown_name(conn: Conn, operation: str) -> None:
    """Operations on a name no live endpoint has raise EndpointNotFound."""
    add(conn, "gone")
    store.remove_endpoint(conn, "gone", force=False)
    conn.commit()
    calls: dict[str, Callable[[], object]] = {
        "enable": lambda: store.set_enabled(conn, "gone", enabled=True),
        "disable": lambda: store.set_enabled(conn, "gone", enabled=False),
        "remove": lambda: store.remove_endpoint(conn, "gone", force=False),
        "rotate": lambda: store.rotate_endpoint_secret(conn, "gone", SECRET, timedelta(hours=1)),
    }
    with pytest.raises(EndpointNotFound, match="no endpoint named gone"):
        calls[operation]()


def test_remove_refused_then_forced(conn: Conn) -> None:
    """Undelivered deliveries refuse a removal; forced, they become dead letters saying why."""
    endpoint_id = add(conn, "hooks")
    other = add(conn, "other")
    publish(conn, "a", "b", "c")
    conn.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now() "
                 "WHERE id = (SELECT min(id) FROM outbox.deliveries WHERE endpoint_id = %s)",
                 (endpoint_id,))
    conn.execute("UPDATE outbox.deliveries SET state = 'in_flight', "
                 "lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' "
                 "WHERE id = (SELECT max(id) FROM outbox.deliveries WHERE endpoint_id = %s)",
                 (endpoint_id,))
    conn.commit()
    with pytest.raises(EndpointBusy, match=r"2 undelivered deliveries.*force=True") as info:
        store.remove_endpoint(conn, "hooks", force=False)
    assert info.value.undelivered == {"hooks": 2}
    conn.rollback()
    assert store.remove_endpoint(conn, "hooks", force=True) == 2
    conn.commit()
    got = states(conn, endpoint_id)
    assert got[0] == ("delivered", None)
    assert [s for s, _ in got[1:]] == ["dead", "dead"]
    assert all("endpoint hooks" in (e or "") and "removed" in (e or "") for _, e in got[1:])
    leftover = conn.execute("SELECT count(*) FROM outbox.deliveries WHERE endpoint_id = %s AND "
                            "(finished_at IS NULL OR lease_token IS NOT NULL)",
                            (endpoint_id,)).fetchone()
    assert leftover == (0,)
    assert [s for s, _ in states(conn, other)] == ["pending"] * 3
    publish(conn, "d")
    assert len(states(conn, endpoint_id)) == 3  # a removed endpoint receives nothing new


def test_rotate_keeps_old_secrets_newest_first_and_prunes(conn: Conn) -> None:
    """Rotation keeps the retired secret for the overlap, newest first, dropping expired ones."""
    add(conn, "hooks", secret=SECRET)
    store.rotate_endpoint_secret(conn, "hooks", "env:OUTBOX_SECRET_2", timedelta(hours=2))
    conn.commit()
    r = row(conn, "hooks")
    assert r["secret"] == "env:OUTBOX_SECRET_2"
    assert [p["secret"] for p in r["previous_secrets"]] == [SECRET]
    ends = conn.execute("SELECT (%s::jsonb -> 0 ->> 'expires_at')::timestamptz - now() "
                        "> interval '119 minutes'", (psycopg.types.json.Jsonb(
                            r["previous_secrets"]),)).fetchone()
    assert ends == (True,)
    until = store.rotate_endpoint_secret(conn, "hooks", "env:OUTBOX_SECRET_3", timedelta(hours=1))
    conn.commit()
    # The secret just retired signs for the hour; the one before it for longer (2 h).
    assert until.retired_until is not None
    assert until.signs_until is not None
    assert until.signs_until - until.retired_until > timedelta(minutes=59)
    assert [p["secret"] for p in row(conn, "hooks")["previous_secrets"]] == \
        ["env:OUTBOX_SECRET_2", SECRET]
    conn.execute("UPDATE outbox.endpoints SET previous_secrets = jsonb_set(previous_secrets, "
                 "'{1,expires_at}', to_jsonb(now() - interval '1 second'))")
    store.rotate_endpoint_secret(conn, "hooks", "env:OUTBOX_SECRET_4", timedelta(hours=1))
    conn.commit()
    assert [p["secret"] for p in row(conn, "hooks")["previous_secrets"]] == \
        ["env:OUTBOX_SECRET_3", "env:OUTBOX_SECRET_2"]


def test_rotate_from_unsigned_or_with_zero_overlap_keeps_nothing(conn: Conn) -> None:
    """An endpoint without a secret, or a zero overlap, leaves no previous secret."""
    add(conn, "hooks")
    assert store.rotate_endpoint_secret(conn, "hooks", SECRET, timedelta(hours=1)) == (None, None)
    assert store.rotate_endpoint_secret(conn, "hooks", "env:OUTBOX_SECRET_N",
                                        timedelta(0)) == (None, None)
    conn.commit()
    assert row(conn, "hooks")["previous_secrets"] == []


def test_sync_adds_changes_removes(conn: Conn) -> None:
    """Sync makes the live endpoints exactly the given specs; unwritten options reset."""
    add(conn, "keep", max_attempts=3)
    add(conn, "change", max_attempts=7, timeout=3, headers={"x-a": "1"})
    add(conn, "drop")
    store.set_enabled(conn, "change", enabled=False, reason="by hand")
    conn.commit()
    report = store.sync_endpoints(conn, [
        EndpointSpec(name="keep", url=URL, max_attempts=3),
        EndpointSpec(name="change", url=URL, events=["mail.*"]),
        EndpointSpec(name="new", url="http://new.internal/"),
    ], force=False)
    conn.commit()
    assert report.added == ["new"]
    assert report.unchanged == ["keep"]
    assert report.changed == {"change": ["events", "max_attempts", "timeout", "headers"]}
    assert report.removed == {"drop": 0}
    names = [e.name for e in store.list_endpoints(conn)]
    assert names == ["change", "keep", "new"]
    r = row(conn, "change")
    assert (r["max_attempts"], r["timeout_seconds"], r["headers"]) == (42, 10, {})
    assert r["events_like"] == ["mail.%"]
    assert not r["enabled"]  # enabled is not an option: a sync leaves it alone


def test_sync_secret_change_is_a_replacement(conn: Conn) -> None:
    """A secret changed by sync replaces the old one with no overlap; an equal one keeps it."""
    add(conn, "hooks", secret=SECRET)
    store.rotate_endpoint_secret(conn, "hooks", "env:OUTBOX_SECRET_N", timedelta(hours=1))
    conn.commit()
    store.sync_endpoints(conn, [EndpointSpec(name="hooks", url=URL, secret="env:OUTBOX_SECRET_N")],
                         force=False)
    assert len(row(conn, "hooks")["previous_secrets"]) == 1
    store.sync_endpoints(conn, [EndpointSpec(name="hooks", url=URL, secret="env:OUTBOX_SECRET_O")],
                         force=False)
    conn.commit()
    r = row(conn, "hooks")
    assert (r["secret"], r["previous_secrets"]) == ("env:OUTBOX_SECRET_O", [])


def test_sync_refused_removal_changes_nothing(conn: Conn) -> None:
    """A busy endpoint missing from the specs refuses the whole sync; forced, all applies."""
    busy = add(conn, "busy")
    add(conn, "idle")
    publish(conn, "x")
    before = conn.execute("SELECT * FROM outbox.endpoints ORDER BY id").fetchall()
    specs = [EndpointSpec(name="idle", url="http://changed/"),
             EndpointSpec(name="new", url=URL)]
    with pytest.raises(EndpointBusy, match="busy"):
        store.sync_endpoints(conn, specs, force=False)
    conn.rollback()
    assert conn.execute("SELECT * FROM outbox.endpoints ORDER BY id").fetchall() == before
    report = store.sync_endpoints(conn, specs, force=True)
    conn.commit()
    assert report.removed == {"busy": 1}
    assert report.added == ["new"]
    assert [s for s, _ in states(conn, busy)] == ["dead"]
