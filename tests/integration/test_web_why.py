"""The web view's pages for the why on a real PostgreSQL: an endpoint's page (its options,
circuit, backlog by tenant, latest failures while still retried, retry-now), with its JSON,
and nothing secret on it (the tenants' page: test_web_tenants.py)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import psycopg
import pytest

from outbox._shared.databases import Database
from outbox.sql import queries
from outbox.web.why import last_hour
from tests.support.dispatcher import publish
from tests.support.web import (
    HEADER_VALUE,
    SECRET,
    TestClient,
    command,
    dead_scene,
    plans,
    tenants_history,
    web_client,
)

Conn = psycopg.Connection[Any]

OPTIONS_KEYS = {"name", "url", "events", "tenant", "signing", "signing_previous_until",
                "max_attempts", "timeout", "min_backoff", "max_backoff", "max_in_flight",
                "rate_limit", "max_batch", "format", "breaker_failures", "breaker_cooldown",
                "breaker_window", "breaker_rate", "max_pending", "max_pending_per_tenant",
                "send_tracestate", "ca_file", "client_cert", "client_key", "headers",
                "enabled", "disabled_reason", "created_at", "updated_at"}


def failing_scene(conn: Conn) -> dict[str, Any]:
    """The dead-letter scene, plus tenants' deliveries at billing still being retried
    after HTTP 500s, and an open circuit."""
    scene = dead_scene(conn)
    retried = [publish(conn, "invoice.sent", {"n": n}, tenant=tenant)
               for n, tenant in enumerate(["acme", "acme", "acme", "globex"])]
    conn.execute(
        "UPDATE outbox.deliveries SET attempts = 3, last_status = 500, "
        "last_error = 'HTTP 500 from receiver: database down', "
        "next_attempt_at = now() + interval '1 hour' WHERE event_id = ANY(%s)", (retried,))
    conn.execute(
        "INSERT INTO outbox.attempts (delivery_id, attempt, at, status, reason, "
        "duration_seconds, error) SELECT id, n, now() - make_interval(secs => 5 - n), 500, "
        "'http_5xx', 0.01, 'HTTP 500 from receiver: database down' "
        "FROM outbox.deliveries, generate_series(1, 3) AS n WHERE event_id = ANY(%s)",
        (retried,))
    conn.execute(
        "UPDATE outbox.endpoint_state SET circuit = 'open', opened_at = now(), "
        "window_attempts = '{12}', window_failures = '{10}' "
        "WHERE endpoint_id = (SELECT id FROM outbox.endpoints WHERE name = 'billing')")
    conn.commit()
    return {**scene, "retried": retried}


@pytest.fixture
def scene(conn: Conn) -> dict[str, Any]:
    return failing_scene(conn)


def test_endpoint_page_says_why_while_deliveries_are_retried(dsn: str,
                                                             scene: dict[str, Any]) -> None:
    """`/endpoints/NAME` shows the open circuit, the failures still being retried with their
    status and error, the backlog by tenant, and no secret or header value."""
    with web_client(dsn) as client:
        page = client.get("/endpoints/billing")
        home = client.get("/")
    assert page.status_code == 200
    text = page.text
    assert "open since" in text
    assert "10 failed of 12 attempts" in text
    assert "HTTP 500 from receiver: database down" in text
    assert f'href="/events/{scene["retried"][0]}"' in text
    assert text.index(">acme<") < text.index(">globex<")
    assert 'href="/dead?endpoint=billing&amp;tenant=acme"' in text
    assert SECRET not in text
    assert HEADER_VALUE not in text
    assert "<form" not in text.split("<main>", 1)[1]
    assert 'href="/endpoints/billing"' in home.text
    assert "last failure: HTTP 500: HTTP 500 from receiver: database down" in home.text
    assert 'href="/tenants"' in home.text


def test_endpoint_json_is_its_list_object_with_the_why(dsn: str, scene: dict[str, Any]) -> None:
    """`?format=json` is the `endpoints list --json` object with the circuit, the backlog by
    tenant (largest first) and the latest failures, newest first, with exactly their keys."""
    with web_client(dsn) as client:
        doc = client.get("/endpoints/billing?format=json").json()
    listed = next(e for e in command(dsn, "endpoints", "list") if e["name"] == "billing")
    assert {k: doc[k] for k in listed} == listed
    assert doc["circuit"] == "open"
    assert doc["circuit_window"]["failures"] == 10
    assert [(b["tenant"], b["pending"]) for b in doc["backlog_by_tenant"]] == \
        [("acme", 3), ("globex", 1)]
    assert all(set(b) == {"tenant", "pending", "in_flight", "oldest_pending_seconds"}
               for b in doc["backlog_by_tenant"])
    failures = doc["recent_failures"]
    assert len(failures) == 14  # 4 retried deliveries x 3, and the dead one's 2
    assert all(set(f) == {"at", "event_id", "status", "reason", "error"} for f in failures)
    assert [f["at"] for f in failures] == sorted((f["at"] for f in failures), reverse=True)
    retried = {str(e) for e in scene["retried"]}
    assert {f["event_id"] for f in failures if f["status"] == 500} == retried
    assert failures[0]["reason"] == "http_5xx"
    body = json.dumps(doc)
    assert SECRET not in body
    assert HEADER_VALUE not in body


def test_an_unknown_endpoint_is_a_404(dsn: str, scene: dict[str, Any]) -> None:
    """An endpoint no live one is named is a 404, as a page and as JSON."""
    with web_client(dsn) as client:
        page = client.get("/endpoints/nope")
        doc = client.get("/endpoints/nope?format=json")
    assert page.status_code == 404
    assert doc.status_code == 404
    assert "nope" in doc.json()["error"]


def test_the_backlog_by_tenant_reads_the_backlog_not_the_table(conn: Conn) -> None:
    """On 60,000 finished deliveries of 40 endpoints, an endpoint's backlog by tenant (and
    `status --tenants`) reads each endpoint's undelivered rows through their partial
    indexes: its plan never scans the deliveries table (it did once per endpoint: 4.7 s
    for 500 tenants' endpoints)."""
    tenants_history(conn)
    found = plans(conn, {"admin_tenant_backlogs": {"per_endpoint": 5, "endpoint": None}})
    assert "Seq Scan on deliveries" not in found["admin_tenant_backlogs"], found


def page_token(client: TestClient) -> str:
    page = client.get("/endpoints/billing")
    assert page.status_code == 200
    found = re.search(r'name="token" value="([0-9a-f]+)"', page.text)
    assert found, "no form on the page"
    assert '<form method="post" action="/endpoints/billing/retry-now">' in page.text
    return found.group(1)


def due_later(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM outbox.deliveries d JOIN outbox.endpoints e "
                       "ON e.id = d.endpoint_id WHERE e.name = 'billing' "
                       "AND d.state = 'pending' AND d.next_attempt_at > now()").fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def test_retry_now_refused_without_actions_or_token(dsn: str, conn: Conn,
                                                    scene: dict[str, Any]) -> None:
    """Read-only, or without the page's token, a retry-now POST is a 403 changing nothing."""
    before = due_later(conn)
    with web_client(dsn) as client:
        assert client.post("/endpoints/billing/retry-now",
                           data={"token": "x"}).status_code == 403
    with web_client(dsn, allow_actions=True) as client:
        token = page_token(client)
        assert client.post("/endpoints/billing/retry-now", data={}).status_code == 403
        assert client.post("/endpoints/billing/retry-now",
                           data={"token": "0" * len(token)}).status_code == 403
    assert before == 4
    assert due_later(conn) == before


def test_retry_now_makes_the_deliveries_due(dsn: str, conn: Conn, scene: dict[str, Any],
                                            caplog: pytest.LogCaptureFixture) -> None:
    """With --allow-actions and the page's token, retry-now does what the command does,
    redirects to the page with a note, and is logged."""
    with web_client(dsn, allow_actions=True) as client:
        token = page_token(client)
        with caplog.at_level(logging.INFO, logger="outbox.web"):
            done = client.post("/endpoints/billing/retry-now", data={"token": token})
        assert done.status_code == 303
        assert done.headers["location"].startswith("/endpoints/billing?")
        after = client.get(done.headers["location"])
        unknown = client.post("/endpoints/nope/retry-now", data={"token": token})
    assert due_later(conn) == 0
    assert ("Made 4 pending deliveries of endpoint billing due now; its open circuit went "
            "half-open: the next request is the probe.") in after.text
    assert unknown.status_code == 404
    assert any("at endpoint 'billing' due now (its circuit half-open)" in r.getMessage()
               for r in caplog.records)


def test_retry_now_says_the_circuit_went_half_open_when_none_was_made_due(
        dsn: str, conn: Conn, scene: dict[str, Any]) -> None:
    """With every pending delivery already due and only the open circuit holding them,
    retry-now makes none due but sends the probe: the page says both, in the words of
    `outbox endpoints retry-now`, and says a disabled endpoint keeps them waiting."""
    conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() - interval '1 minute' "
                 "WHERE state = 'pending'")
    conn.execute("UPDATE outbox.endpoints SET enabled = false WHERE name = 'billing'")
    conn.commit()
    with web_client(dsn, allow_actions=True) as client:
        token = page_token(client)
        done = client.post("/endpoints/billing/retry-now", data={"token": token})
        after = client.get(done.headers["location"])
    circuit = conn.execute("SELECT s.circuit FROM outbox.endpoint_state s JOIN "
                           "outbox.endpoints e ON e.id = s.endpoint_id "
                           "WHERE e.name = 'billing'").fetchone()
    conn.commit()
    assert circuit == ("half-open",)
    said = after.text.split('<p class="done">', 1)[1].split("</p>", 1)[0]
    assert said == ("Made 0 pending deliveries of endpoint billing due now; its open circuit "
                    "went half-open: the next request is the probe; the endpoint is "
                    "disabled: they wait until it is enabled.")


def test_links_keep_the_database(dsn: str, scene: dict[str, Any]) -> None:
    """With many databases, the new pages' links keep `?db=`."""
    with web_client("", databases=(Database("one", dsn),)) as client:
        tenants = client.get("/tenants?db=one")
        page = client.get("/endpoints/billing?db=one")
    assert 'href="/dead?tenant=acme&amp;db=one"' in tenants.text
    assert 'href="/?tenant=acme&amp;db=one"' in tenants.text
    assert 'href="/tenants?db=one"' in page.text


def test_endpoint_page_draws_its_last_hour(dsn: str, scene: dict[str, Any]) -> None:
    """The endpoint's page holds an inline SVG of its last hour per minute (delivered and
    failed attempts, from the history), and no script."""
    with web_client(dsn) as client:
        text = client.get("/endpoints/billing").text
    assert "<svg" in text
    assert "<script" not in text
    assert 'class="failed"' in text
    assert 'class="delivered"' in text
    assert "1 delivered</span>, <span class=\"bad\">14 failed attempts" in text


def test_endpoints_page_draws_every_endpoint_together(dsn: str, scene: dict[str, Any]) -> None:
    """The endpoints page holds one inline SVG of every live endpoint's last hour together:
    delivered and failed attempts as bars, the backlog (5 pending now) as a line; no
    script."""
    with web_client(dsn) as client:
        text = client.get("/").text
    assert text.count("<svg") == 1
    assert "<script" not in text
    assert 'class="failed"' in text
    assert 'class="delivered"' in text
    assert '<polyline class="pending"' in text
    assert "Every endpoint, per minute" in text
    assert "1 delivered</span>, <span class=\"bad\">14 failed attempts" in text
    assert "pending 5 now" in text


def test_the_whole_is_the_sum_of_its_endpoints(conn: Conn, scene: dict[str, Any]) -> None:
    """Minute by minute, every endpoint's chart is the sum of each endpoint's, and its last
    minute's backlog is what is pending or in flight now."""
    with conn.transaction():  # one now(): the three charts cover the same minutes
        whole = last_hour(conn)
        parts = [last_hour(conn, name) for name in ("billing", "mail")]
    assert len(whole.bars) == 60
    for i, bar in enumerate(whole.bars):
        assert (bar.delivered, bar.failed, bar.pending) == (
            sum(p.bars[i].delivered for p in parts), sum(p.bars[i].failed for p in parts),
            sum(p.bars[i].pending for p in parts))
    row = conn.execute("SELECT count(*) FROM outbox.deliveries "
                       "WHERE state IN ('pending', 'in_flight')").fetchone()
    conn.commit()
    assert row is not None
    assert whole.pending_now == row[0] == 5


def test_endpoints_address_leads_to_the_endpoints_page(dsn: str, scene: dict[str, Any]) -> None:
    """`/endpoints`, which an endpoint's address suggests, redirects to `/`, keeping `?db=`."""
    with web_client("", databases=(Database("one", dsn),)) as client:
        moved = client.get("/endpoints?db=one", follow_redirects=False)
        page = client.get(moved.headers["location"])
    assert moved.status_code == 308
    assert moved.headers["location"] == "/?db=one"
    assert page.status_code == 200
    assert 'href="/endpoints/billing?db=one"' in page.text
    assert "Every endpoint, per minute" in page.text


def test_a_chart_past_the_timeout_leaves_the_counts(dsn: str, scene: dict[str, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """When the chart's statement is cancelled by the view's statement timeout, the
    endpoints page still shows the counts and says the chart is not drawn."""
    monkeypatch.setitem(queries, "web_minutes", "SELECT now(), 0, 0, 0 FROM pg_sleep(30)")
    with web_client(dsn, statement_timeout_seconds=1.0) as client:
        page = client.get("/")
    assert page.status_code == 200
    assert "<svg" not in page.text
    assert "chart is not drawn" in page.text
    assert 'href="/endpoints/billing"' in page.text
