"""Tenants on the producer side and in the claim: kept with the event and its deliveries,
refused before any SQL when malformed, key order per tenant, --max-pending-per-tenant, and
the quota hook (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import outbox
from tests.support.claiming import claim, finish

Conn = psycopg.Connection[Any]


@pytest.fixture(autouse=True)
def _no_quota_check() -> Iterator[None]:
    previous = outbox.set_quota_check(None)
    yield
    outbox.set_quota_check(previous)


def _endpoint(conn: Conn, per_tenant: int | None = None) -> None:
    conn.execute("INSERT INTO outbox.endpoints (name, url, max_pending_per_tenant) "
                 "VALUES ('e', 'http://127.0.0.1:9/', %s)", (per_tenant,))
    conn.commit()


def _count(conn: Conn, table: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM outbox.{table}").fetchone()
    return int(row[0]) if row else -1


def test_the_tenant_is_kept_with_the_event_and_each_delivery(conn: Conn) -> None:
    """tenant= is stored on the event and copied to its deliveries; none stays NULL."""
    _endpoint(conn)
    with_tenant = outbox.publish(conn, "t", {}, tenant="acme corp")
    without = outbox.publish_many(conn, [outbox.Event("t", {})])[0]
    conn.commit()
    rows = dict(conn.execute("SELECT e.id, d.tenant FROM outbox.events e JOIN "
                             "outbox.deliveries d ON d.event_id = e.id "
                             "WHERE e.tenant IS NOT DISTINCT FROM d.tenant").fetchall())
    assert rows == {with_tenant: "acme corp", without: None}


@pytest.mark.parametrize("tenant", ["", "x" * 201, "a\tb", "caf\u00e9", 7, b"acme"])
def test_a_malformed_tenant_is_refused_before_any_sql(conn: Conn, tenant: Any) -> None:
    """Anything but 1-200 printable ASCII characters (or None) is InvalidEvent; nothing written."""
    _endpoint(conn)
    with pytest.raises(outbox.InvalidEvent, match="tenant"):
        outbox.publish(conn, "t", {}, tenant=tenant)
    with pytest.raises(outbox.InvalidEvent, match="tenant"):
        outbox.publish_many(conn, [outbox.Event("t", {}), outbox.Event("t", {}, tenant=tenant)])
    conn.commit()
    assert _count(conn, "events") == 0


@pytest.mark.parametrize("tenant", ["", "x" * 201, "a\r\nb", "a\tb", "caf\u00e9"])
def test_the_tables_refuse_what_publish_refuses(conn: Conn, tenant: str) -> None:
    """A tenant written by SQL, past publish(), is held to the same rule by a CHECK on
    events and on deliveries (schema version 14); 200 printable characters pass."""
    _endpoint(conn)
    event = "INSERT INTO outbox.events (id, type, payload, tenant) VALUES (gen_random_uuid(), "
    with pytest.raises(psycopg.errors.CheckViolation, match="events_tenant_printable"):
        conn.execute((event + "'t', '{}', %s)").encode(), (tenant,))
    conn.rollback()
    with pytest.raises(psycopg.errors.CheckViolation, match="deliveries_tenant_printable"):
        conn.execute("INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, tenant) "
                     "VALUES (gen_random_uuid(), 1, 1, %s)", (tenant,))
    conn.rollback()
    conn.execute((event + "'t', '{}', %s)").encode(), ("~" * 199 + " ",))


def _tenant_of(row: tuple[Any, ...]) -> str | None:
    value: str | None = json.loads(row[7])["tenant"]  # the payload names its tenant
    return value


def test_key_order_is_per_tenant(conn: Conn) -> None:
    """One key, three tenants (none is one of its own): their heads go at once; a tenant's
    second event of the key waits for its first."""
    _endpoint(conn)
    for tenant in ("a", "b", None, "a"):
        outbox.publish(conn, "t", {"tenant": tenant}, key="k", tenant=tenant)
    conn.commit()
    first = claim(conn, [1])
    assert sorted(str(_tenant_of(row)) for row in first) == ["None", "a", "b"]
    assert claim(conn, [1]) == []  # a's second waits for a's first
    [a_first] = [row for row in first if _tenant_of(row) == "a"]
    finish(conn, a_first)
    [after] = claim(conn, [1])
    assert _tenant_of(after) == "a"


def test_one_tenant_at_its_bound_is_refused_and_others_publish(conn: Conn) -> None:
    """--max-pending-per-tenant: the tenant at its bound gets BacklogFull naming the endpoint
    and the tenant, nothing written; other tenants and events without one go on."""
    _endpoint(conn, per_tenant=2)
    outbox.publish_many(conn, [outbox.Event("t", {}, tenant="a") for _ in range(2)])
    conn.commit()
    with pytest.raises(outbox.BacklogFull) as refused:
        outbox.publish(conn, "t", {}, tenant="a")
    assert (refused.value.endpoint, refused.value.tenant, refused.value.bound,
            refused.value.backlog) == ("e", "a", 2, 2)
    assert "tenant 'a'" in str(refused.value)
    conn.rollback()
    outbox.publish(conn, "t", {}, tenant="b")
    outbox.publish_many(conn, [outbox.Event("t", {}) for _ in range(5)])
    conn.commit()
    assert _count(conn, "events") == 8
    for row in claim(conn, [1]):  # delivered deliveries leave the tenant's count
        finish(conn, row)
    outbox.publish(conn, "t", {}, tenant="a")
    conn.commit()


def test_the_quota_check_is_asked_once_per_tenant_before_anything_is_written(conn: Conn) -> None:
    """check(conn, tenant, events) per distinct tenant, in first-appearance order, not for
    events without a tenant; what it raises propagates and nothing of the call is written."""
    _endpoint(conn)
    asked: list[tuple[Any, str, list[Any]]] = []

    def check(c: Any, tenant: str, events: list[outbox.Event]) -> None:
        asked.append((c, tenant, [e.payload for e in events]))
        if tenant == "over":
            raise RuntimeError("over its plan")

    assert outbox.set_quota_check(check) is None
    outbox.publish_many(conn, [outbox.Event("t", 1, tenant="b"), outbox.Event("t", 2),
                               outbox.Event("t", 3, tenant="a"), outbox.Event("t", 4, tenant="b")])
    assert asked == [(conn, "b", [1, 4]), (conn, "a", [3])]
    asked.clear()
    with pytest.raises(RuntimeError, match="over its plan"):
        outbox.publish_many(conn, [outbox.Event("t", 5, tenant="over"),
                                   outbox.Event("t", 6, tenant="never asked")])
    assert [tenant for _, tenant, _ in asked] == ["over"]
    conn.commit()
    assert _count(conn, "events") == 4
    assert outbox.set_quota_check(None) is check


def test_an_idempotent_re_publish_is_checked_too(conn: Conn) -> None:
    """The check runs before the database says the event is already there."""
    _endpoint(conn)
    asked: list[str] = []
    outbox.set_quota_check(lambda c, tenant, events: asked.append(tenant))
    first = outbox.publish(conn, "t", {}, tenant="a", idempotency_key="k1")
    again = outbox.publish(conn, "t", {}, tenant="a", idempotency_key="k1")
    assert first == again
    assert asked == ["a", "a"]


def test_publish_refuses_an_async_check_and_apublish_awaits_it(dsn: str) -> None:
    """A check returning an awaitable: TypeError from publish() (nothing written), awaited by
    apublish()."""
    asked: list[str] = []

    async def check(c: Any, tenant: str, events: list[outbox.Event]) -> None:
        asked.append(tenant)

    outbox.set_quota_check(check)
    with psycopg.connect(dsn) as conn:
        _endpoint(conn)
        with pytest.raises(TypeError, match="apublish"):
            outbox.publish(conn, "t", {}, tenant="a")
        conn.rollback()
        assert _count(conn, "events") == 0

    async def publish_async() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            await outbox.apublish(aconn, "t", {}, tenant="b")
            await aconn.commit()

    asyncio.run(publish_async())
    assert asked == ["b"]


def _quota_example() -> dict[str, Any]:
    """The quota hook's example of docs/concepts.md, run as it is written there."""
    text = (Path(__file__).parents[2] / "docs" / "concepts.md").read_text("utf-8")
    start = text.index("```python\nclass OverQuota")
    code = text[start + len("```python\n"):text.index("```", start + 10)]
    scope: dict[str, Any] = {"outbox": outbox}
    exec(compile(code, "docs/concepts.md", "exec"), scope)
    return scope


def test_the_quota_example_holds_under_concurrent_publishers(dsn: str) -> None:
    """With the example's check installed and a quota of 1, eight publishers racing for it
    (each holding its transaction open past the check) publish exactly one event."""
    with psycopg.connect(dsn, autocommit=True) as setup_conn:
        setup_conn.execute("CREATE TABLE plans (tenant text PRIMARY KEY, monthly_events int)")
        setup_conn.execute("CREATE TABLE usage (tenant text, month timestamptz, used int, "
                           "PRIMARY KEY (tenant, month))")
        setup_conn.execute("INSERT INTO plans VALUES ('acme', 1)")
        setup_conn.execute("INSERT INTO outbox.endpoints (name, url) "
                           "VALUES ('e', 'http://127.0.0.1:9/')")
    scope = _quota_example()
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def publisher() -> None:
        with psycopg.connect(dsn) as conn:
            barrier.wait(timeout=30)
            try:
                outbox.publish(conn, "t", {}, tenant="acme")
                time.sleep(0.2)  # the transaction stays open: a racer would read past it
                conn.commit()
                outcomes.append("published")
            except scope["OverQuota"]:
                conn.rollback()
                outcomes.append("refused")

    threads = [threading.Thread(target=publisher) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["published"] + ["refused"] * 7
    with psycopg.connect(dsn) as conn:
        assert _count(conn, "events") == 1
