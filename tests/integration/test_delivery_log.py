"""The delivery log from the application: deliveries() pages, attempts(), the view
outbox.delivery_log, and the plan a page runs on a big table (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import outbox
from outbox import endpoints, history
from outbox._present.shapes import rfc3339
from outbox.sql import queries

Conn = psycopg.Connection[Any]
KEYS = ["event_id", "endpoint", "tenant", "type", "key", "state", "attempts", "created_at",
        "next_attempt_at", "delivered_at", "last_status", "last_error", "cursor"]


@pytest.fixture
def log(conn: Conn) -> dict[str, uuid.UUID]:
    """acme's endpoint with five deliveries in five states, globex's with one; committed."""
    endpoints.add(conn, "acme-hook", url="https://hooks.acme.example/", tenant="acme")
    endpoints.add(conn, "globex-hook", url="https://hooks.globex.example/", tenant="globex")
    ids = {name: outbox.publish(conn, f"order.{name}", {}, key=name, tenant="acme")
           for name in ("delivered", "dead", "retrying", "parked", "fresh")}
    ids["globex"] = outbox.publish(conn, "order.globex", {}, tenant="globex")
    for sql, name in [
        ("state = 'delivered', finished_at = now(), attempts = 2, attempts_before = 1, "
         "last_status = 200", "delivered"),
        ("state = 'dead', finished_at = now(), attempts = 3, last_status = 500, "
         "last_error = 'HTTP 500: boom'", "dead"),
        ("attempts = 1, next_attempt_at = now() + interval '1 hour', last_status = 503",
         "retrying"),
        ("next_attempt_at = 'infinity'", "parked"),
    ]:
        conn.execute(f"UPDATE outbox.deliveries SET {sql} WHERE event_id = %s",
                     (ids[name],))
    conn.commit()
    return ids


def test_a_page_is_the_newest_deliveries_as_documented(conn: Conn,
                                                       log: dict[str, uuid.UUID]) -> None:
    """Each row has the documented keys; times are aware datetimes; next_attempt_at only for
    a pending delivery with a known time; delivered_at only for a delivered one."""
    rows = endpoints.deliveries(conn, "acme-hook", as_tenant="acme")
    assert [list(row) for row in rows] == [KEYS] * 5
    assert [row["key"] for row in rows] == ["fresh", "parked", "retrying", "dead", "delivered"]
    by_key = {row["key"]: row for row in rows}
    assert by_key["delivered"]["attempts"] == 3
    assert isinstance(by_key["delivered"]["delivered_at"], datetime)
    assert by_key["delivered"]["delivered_at"].utcoffset() is not None
    assert by_key["dead"]["delivered_at"] is None
    assert by_key["dead"]["last_error"] == "HTTP 500: boom"
    assert by_key["retrying"]["next_attempt_at"] > datetime.now(UTC)
    assert by_key["parked"]["next_attempt_at"] is None
    assert by_key["dead"]["next_attempt_at"] is None
    assert by_key["fresh"]["event_id"] == str(log["fresh"])
    assert {row["tenant"] for row in rows} == {"acme"}
    assert all(row["type"] == f"order.{row['key']}" for row in rows)


def test_filters(conn: Conn, log: dict[str, uuid.UUID]) -> None:
    """state, event_id, tenant and since narrow a page; name None covers every endpoint."""
    def keys(**kwargs: Any) -> list[Any]:
        return [row["key"] for row in endpoints.deliveries(conn, **kwargs)]
    assert keys(name="acme-hook", state="pending") == ["fresh", "parked", "retrying"]
    assert keys(name="acme-hook", state="dead") == ["dead"]
    assert keys(state="delivered") == ["delivered"]
    assert keys(event_id=log["dead"]) == ["dead"]
    assert keys(event_id=str(log["globex"])) == [None]
    assert keys(tenant="globex") == [None]
    assert keys(name="acme-hook", tenant="globex") == []
    assert len(keys(since=timedelta(minutes=5))) == 6
    assert keys(since=datetime.now(UTC) + timedelta(minutes=5)) == []
    assert keys(since=datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=5),
                state="dead") == ["dead"]


def test_pages_neither_skip_nor_repeat(conn: Conn, dsn: str, log: dict[str, uuid.UUID]) -> None:
    """Pages of two, each from the last row's cursor, while other deliveries are made and
    finished between them: every row there was is seen once, in order, none twice."""
    first = [row["event_id"] for row in endpoints.deliveries(conn, "acme-hook")]
    seen: list[str] = []
    before = None
    with psycopg.connect(dsn) as other:
        while True:
            page = endpoints.deliveries(conn, "acme-hook", before=before, limit=2)
            conn.commit()
            outbox.publish(other, "order.later", {}, tenant="acme")
            other.execute("UPDATE outbox.deliveries SET state = 'delivered', "
                          "finished_at = now() WHERE state = 'pending' AND key = 'fresh'")
            other.commit()
            if not page:
                break
            seen += [row["event_id"] for row in page]
            before = page[-1]["cursor"]
    assert seen == first


def test_the_view_has_the_same_rows_but_the_cursor(conn: Conn,
                                                   log: dict[str, uuid.UUID]) -> None:
    """outbox.delivery_log: the columns of deliveries() but cursor, the same values, for
    joins with the application's own tables."""
    rows = endpoints.deliveries(conn)
    with conn.cursor(row_factory=dict_row) as cur:
        viewed = cur.execute("SELECT * FROM outbox.delivery_log "
                             "ORDER BY created_at DESC, event_id").fetchall()
    assert [list(row) for row in viewed] == [KEYS[:-1]] * 6
    by_event = {str(row["event_id"]): row for row in viewed}
    for row in rows:
        assert {**by_event[row["event_id"]], "event_id": row["event_id"]} == {
            k: v for k, v in row.items() if k != "cursor"}


def test_attempts_is_shows_deliveries_list(conn: Conn, log: dict[str, uuid.UUID]) -> None:
    """attempts(): show --json's deliveries list, times as datetimes; [] for an unknown
    event; under as_tenant, another tenant's event is [] too."""
    dead = conn.execute("SELECT id FROM outbox.deliveries WHERE event_id = %s",
                        (log["dead"],)).fetchone()
    assert dead is not None
    for number in (1, 2):
        conn.execute("INSERT INTO outbox.attempts (delivery_id, attempt, status, reason, "
                     "error, duration_seconds) VALUES (%s, %s, 500, 'http_5xx', 'boom', 0.5)",
                     (dead[0], number))
    conn.commit()
    found = endpoints.attempts(conn, log["dead"], as_tenant="acme")
    shown = history.delivery_dicts(history.show(conn, log["dead"]).deliveries, rfc3339)
    assert found[0]["history"][0]["at"].utcoffset() is not None
    assert _as_text(found) == shown
    assert [d["attempts"] for d in found] == [3]
    assert endpoints.attempts(conn, uuid.uuid4()) == []
    assert endpoints.attempts(conn, log["globex"], as_tenant="acme") == []
    assert len(endpoints.attempts(conn, str(log["globex"]))) == 1


def _as_text(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**d, "next_attempt_at": rfc3339(d["next_attempt_at"]),
             "history": [{**a, "at": rfc3339(a["at"])} for a in d["history"]]} for d in found]


def test_the_async_twins(dsn: str, log: dict[str, uuid.UUID]) -> None:
    """adeliveries and aattempts answer as deliveries and attempts do."""
    async def scenario() -> tuple[list[Any], list[Any]]:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            return (await endpoints.adeliveries(aconn, "acme-hook", state="dead"),
                    await endpoints.aattempts(aconn, log["dead"]))
    rows, story = asyncio.run(scenario())
    with psycopg.connect(dsn) as conn:
        assert rows == endpoints.deliveries(conn, "acme-hook", state="dead")
        assert story == endpoints.attempts(conn, log["dead"])


def test_a_page_reads_the_endpoints_rows_only(conn: Conn) -> None:
    """On 60,000 finished deliveries of 40 endpoints, one of them busy long ago and quiet
    since: its page reads deliveries_log backwards from the page's start, never the whole
    table nor the primary key filtered by endpoint (the plan the statement runs, with the
    values deliveries() gives it)."""
    conn.execute("INSERT INTO outbox.endpoints (name, url) SELECT 'ep' || g, 'https://x/' "
                 "FROM generate_series(1, 40) g")
    conn.execute("INSERT INTO outbox.events (id, type, payload) VALUES "
                 "('00000000-0000-7000-8000-000000000001', 't', '{}')")
    conn.execute("""
        INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, finished_at)
        SELECT '00000000-0000-7000-8000-000000000001',
               CASE WHEN g <= 5000 THEN 1 ELSE 2 + g % 39 END, g,
               CASE WHEN g % 50 = 0 THEN 'dead' ELSE 'delivered' END, now()
        FROM generate_series(1, 60000) g""")
    conn.execute("ANALYZE outbox.deliveries")
    conn.commit()
    params = {"endpoint_ids": [1], "as_tenant": None, "tenant": None, "event_id": None,
              "state": None, "since": None, "before": 2**63 - 1, "limit": 100,
              "finished": True, "unfinished": True}
    with conn.cursor() as cur:
        plan = "\n".join(row[0] for row in cur.execute(
            "EXPLAIN " + queries["delivery_log"], params, prepare=False).fetchall())
    assert "Scan Backward using deliveries_log" in plan, plan
    assert "Backward using deliveries_pkey" not in plan, plan
    assert "Seq Scan on deliveries" not in plan, plan
    assert len(endpoints.deliveries(conn, "ep1")) == 100
