"""The web view in a real browser: an operator names the failing endpoint, its last error
and the tenant that waits, follows an endpoint to its dead letter, retries it, and sees it
delivered; support goes from a customer's name to its endpoints, sends a customer's held
deliveries with retry-now, and pages through the tenants.

The deliveries are a real dispatcher's, made in a few seconds; their times are then
spread over the last hour (created, finished and attempted earlier, in SQL), so that the
charts and the screenshots show an hour as an operator meets it: mail delivering all
along, crm failing for the last 25 minutes with its backlog growing.

Debian's Chromium, driven headless by Playwright (which is given the
system browser's path: it cannot download one of its own here), against
``outbox web --allow-actions`` (a real uvicorn), a real dispatcher and a
receiver on 127.0.0.1. Each page's screenshot is saved under the test's
temporary directory, and also into ``$OUTBOX_SCREENSHOTS`` when that names a
folder (``docs/images`` for the operations guide). Skipped, with the reason,
where Playwright or a Chromium is missing (``.ci/run`` installs both).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox import endpoints
from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    publish,
    wait_all_finished,
    wait_for_state,
    wait_until,
)
from tests.support.web_server import web_server

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed "
                               "(pip install playwright; the test extra has it)")

WIDTH, HEIGHT = 1280, 720
MAIL = 240
"""Mail's deliveries over the hour."""
CRM_DELIVERED = 120
"""crm's deliveries before it began failing."""
TENANTS = ("acme", "globex", "initech", "umbrella")
CRM_WAITING = ("acme",) * 17 + ("globex",) * 6 + ("initech",) * 2
"""The tenants of crm's backlog, acme's the largest."""
CRM_ERROR = "upstream CRM database unavailable (connection pool exhausted)"
ACME = "customer-acme-corporation-order-webhooks"
"""acme's own endpoint, named as a customer's is, longer than a column's usual room: it
answers 400, so its delivery is dead at once."""
PARTNER = "globex-partner-notifications-eu-west"
"""globex's own endpoint, its circuit held open for an hour over deliveries already due."""
PARTNER_WAITING = 10
PAGED = 120
"""Tenants added for the tenants' pages (100 a page)."""


def chromium() -> str:
    """The system's Chromium: ``$OUTBOX_CHROMIUM``, else ``chromium`` on the PATH."""
    found = os.environ.get("OUTBOX_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not found:
        pytest.skip("no Chromium here: apt-get install chromium (as root; .ci/run does), "
                    "or set OUTBOX_CHROMIUM to a Chromium binary")
    return found


class Shots:
    """Screenshots of each page, full length, named for the docs (web-NAME.png)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        extra = os.environ.get("OUTBOX_SCREENSHOTS")
        self.copy_to = Path(extra) if extra else None

    def take(self, page: Any, name: str) -> None:
        path = self.folder / f"web-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        if self.copy_to is not None:
            self.copy_to.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, self.copy_to / path.name)


def test_follow_an_endpoint_to_its_dead_letter_retry_it_and_see_it_delivered(
        dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    """The overview's chart -> the failing endpoint's page (last error, waiting tenant) ->
    another's dead letters -> the event -> Retry -> delivered; the search, the tenants."""
    browser_path = chromium()
    shots = Shots(tmp_path / "screenshots")
    billing_up = False
    crm_up = True

    def respond(request: Request) -> Response:
        if request.path.startswith("/customer-acme"):
            return Response(400, body=b"unknown order schema version")
        if request.path.startswith("/billing") and not billing_up:
            return Response(503, body=b"billing is down for maintenance until 16:00 UTC, see "
                            b"https://status.billing.example/incidents/2026-12-03-4711")
        if request.path.startswith("/crm") and not crm_up:
            return Response(500, body=CRM_ERROR.encode())
        return Response(200)

    with Receiver(respond) as receiver:
        add_endpoint(conn, "billing", receiver.url + "billing", events=("invoice.*",),
                     max_attempts=2, secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        add_endpoint(conn, "mail", receiver.url + "mail", events=("mail.*",))
        # Retried every ten minutes, and never enough failures to open the circuit: the
        # backlog stays pending, each delivery with its failed attempt.
        add_endpoint(conn, "crm", receiver.url + "crm", events=("crm.*",), max_attempts=20,
                     min_backoff_seconds=600, max_backoff_seconds=600, breaker_failures=10_000)
        for n in range(3):
            publish(conn, "mail.sent", {"n": n}, key="customer-7")
        event = publish(conn, "invoice.paid", {"invoice": "INV-1001", "cents": 4200},
                        key="customer-7", idempotency_key="order-1001")
        with Dispatcher(dsn) as dispatcher:
            for n in range(MAIL):
                publish(conn, "mail.sent", {"n": n})
            for n in range(CRM_DELIVERED):
                publish(conn, "crm.contact.updated", {"n": n}, tenant=TENANTS[n % 4])
            wait_all_finished(conn, 3 + MAIL + CRM_DELIVERED + 1, timeout=120,
                              dispatcher=dispatcher)
            crm_up = False
            for n, tenant in enumerate(CRM_WAITING):
                publish(conn, "crm.contact.updated", {"n": n}, tenant=tenant)
            wait_until(lambda: _all_attempted(conn, len(CRM_WAITING)), timeout=120,
                       what="crm's deliveries to fail once", dispatcher=dispatcher)
            wait_for_state(conn, event, "dead", dispatcher=dispatcher)
            _spread_over_the_hour(conn)
            _customers(conn, receiver.url, dispatcher)
            billing_up = True
            with web_server(dsn, "--allow-actions") as url, \
                    sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=browser_path, headless=True,
                    args=["--no-sandbox"] if os.geteuid() == 0 else [])
                try:
                    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                    _walk(page, url, str(event), shots)
                    _support(page, url, shots)
                finally:
                    browser.close()
            delivered = wait_for_state(conn, event, "delivered", dispatcher=dispatcher)
            for n in range(PAGED):
                endpoints.add(conn, f"hooks-{n:03d}", url=receiver.url + "paged",
                              events=("paged.*",), tenant=f"tenant-{n:03d}")
            conn.commit()
            # A view started now: the tenants' list is read afresh, not from a cache.
            with web_server(dsn) as url, sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=browser_path, headless=True,
                    args=["--no-sandbox"] if os.geteuid() == 0 else [])
                try:
                    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                    _tenants_pages(page, url)
                finally:
                    browser.close()
    assert delivered["attempts"] == 1
    assert {p.name for p in shots.folder.iterdir()} == {
        "web-overview.png", "web-dead.png", "web-event.png", "web-event-delivered.png",
        "web-search.png", "web-endpoint.png", "web-tenants.png", "web-tenant.png",
        "web-retry-now.png"}
    print(f"screenshots: {shots.folder}")


def _customers(conn: psycopg.Connection[Any], base: str, dispatcher: Dispatcher) -> None:
    """acme's own endpoint with its dead letter, and globex's with deliveries due that its
    open circuit holds back (the dispatcher sees them and sends nothing)."""
    endpoints.add(conn, ACME, url=base + "customer-acme", events=("order.*",),
                  tenant="acme", max_attempts=1)
    endpoints.add(conn, PARTNER, url=base + "partner", events=("notice.*",), tenant="globex",
                  breaker_cooldown=3600)
    held = conn.execute(
        "UPDATE outbox.endpoint_state SET circuit = 'open', opened_at = now() "
        "WHERE endpoint_id = (SELECT id FROM outbox.endpoints WHERE name = %s "
        "AND removed_at IS NULL)", (PARTNER,)).rowcount
    conn.commit()
    assert held == 1
    order = publish(conn, "order.placed", {"order": 7}, tenant="acme")
    for n in range(PARTNER_WAITING):
        publish(conn, "notice.sent", {"n": n}, tenant="globex")
    wait_for_state(conn, order, "dead", dispatcher=dispatcher)
    dispatcher.wait_serving()


def _all_attempted(conn: psycopg.Connection[Any], waiting: int) -> bool | None:
    """Every crm delivery still pending has failed once, and none is in flight."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE d.state = 'pending' AND d.attempts >= 1), "
        "count(*) FILTER (WHERE d.state = 'in_flight') FROM outbox.deliveries d "
        "JOIN outbox.endpoints e ON e.id = d.endpoint_id WHERE e.name = 'crm'").fetchone()
    conn.commit()
    assert row is not None
    return True if (row[0], row[1]) == (waiting, 0) else None


def _spread_over_the_hour(conn: psycopg.Connection[Any]) -> None:
    """The finished deliveries' times spread over the hour (crm's until 25 minutes ago),
    the waiting ones' (and their failed attempts') over the last 25 minutes."""
    conn.execute(
        "WITH r AS (SELECT d.id, e.name, row_number() OVER (PARTITION BY e.name ORDER BY d.id)"
        " AS n, count(*) OVER (PARTITION BY e.name) AS total FROM outbox.deliveries d"
        " JOIN outbox.endpoints e ON e.id = d.endpoint_id"
        " WHERE d.state = 'delivered' AND e.name IN ('mail', 'crm')),"
        " t AS (SELECT id, now() - make_interval(secs => CASE name WHEN 'mail'"
        "   THEN 3590.0 * (total - n) / total ELSE 1560 + 2000.0 * (total - n) / total END)"
        "   AS at FROM r)"
        " UPDATE outbox.deliveries d SET created_at = t.at - interval '1 second',"
        " finished_at = t.at FROM t WHERE d.id = t.id")
    conn.execute(
        "WITH r AS (SELECT d.id, row_number() OVER (ORDER BY d.id) AS n, count(*) OVER ()"
        " AS total FROM outbox.deliveries d JOIN outbox.endpoints e ON e.id = d.endpoint_id"
        " WHERE d.state = 'pending' AND e.name = 'crm'),"
        " t AS (SELECT id, now() - make_interval(secs => 1500.0 * (total - n) / total)"
        "   AS at FROM r),"
        " a AS (UPDATE outbox.attempts a SET at = t.at + interval '2 seconds' FROM t"
        "   WHERE a.delivery_id = t.id)"
        " UPDATE outbox.deliveries d SET created_at = t.at FROM t WHERE d.id = t.id")
    conn.commit()


def _walk(page: Any, url: str, event: str, shots: Shots) -> None:
    """What the operator does, page by page, each page photographed."""
    expect = sync_api.expect
    page.goto(url + "/")
    expect(page.locator("h1")).to_have_text("Endpoints")
    expect(page.locator("tr", has_text="billing")).to_contain_text("1")
    chart = page.locator("figure.chart svg")
    expect(chart).to_have_count(1)  # every endpoint's last hour together
    expect(chart.locator("rect.delivered")).not_to_have_count(0)
    expect(chart.locator("rect.failed")).not_to_have_count(0)
    expect(chart.locator("polyline.pending")).to_have_count(1)
    assert chart.bounding_box()["height"] > 40
    expect(page.locator("figure.chart figcaption")).to_contain_text(
        f"pending {len(CRM_WAITING) + PARTNER_WAITING} now")
    # The time axis: a tick and its time (UTC) at each ten minutes of the hour.
    times = chart.locator("g.time text")
    expect(times).not_to_have_count(0)
    assert all(re.fullmatch(r"\d\d:\d0", t) for t in times.all_text_contents())
    # Names on one line, and the problems beside them as prose, within the screen.
    layout = page.evaluate("""() => ({
        page: document.documentElement.scrollWidth,
        problem: document.querySelector("table.endpoints td.error").offsetWidth})""")
    assert layout["page"] <= WIDTH, layout
    assert layout["problem"] >= 0.2 * WIDTH, layout
    # Each endpoint's tenant, linked to the tenant's endpoints; crm belongs to none.
    expect(page.locator("tr", has_text=ACME).get_by_role("link", name="acme", exact=True)
           ).to_have_attribute("href", "/?tenant=acme")
    expect(page.locator("tr", has=page.get_by_role("link", name="crm", exact=True))
           .locator("td").nth(1)).to_have_text("-")
    shots.take(page, "overview")

    # The walk of the operations guide: the failing endpoint, its last error, the tenant
    # that waits, from the web view alone.
    crm = page.locator("tr", has_text="crm")
    expect(crm).to_have_class("attention")  # highlighted while its deliveries fail
    expect(crm).to_contain_text("last failure: HTTP 500: HTTP 500 Internal Server Error: "
                                + CRM_ERROR)
    page.get_by_role("link", name="crm", exact=True).click()
    page.wait_for_url("**/endpoints/crm")
    expect(page.locator("h1")).to_have_text("Endpoint crm")
    chart = page.locator("figure.chart svg")
    expect(chart.locator("rect.failed")).not_to_have_count(0)
    expect(chart.locator("polyline.pending")).to_have_count(1)
    failures, backlog = page.locator("table").nth(0), page.locator("table").nth(1)
    expect(failures.locator("tbody tr").first).to_contain_text(CRM_ERROR)
    expect(backlog.locator("tbody tr").first).to_contain_text("acme")
    expect(backlog.locator("tbody tr").first).to_contain_text("17")
    shots.take(page, "endpoint")

    page.goto(url + "/")
    expect(page.locator("tr", has_text="billing")).to_contain_text("last failure: HTTP 503")
    page.get_by_role("link", name="billing", exact=True).click()
    page.wait_for_url("**/endpoints/billing")
    expect(page.locator("h1")).to_have_text("Endpoint billing")
    expect(page.locator("table").first).to_contain_text("HTTP 503")
    expect(page.locator("figure.chart svg rect.failed")).not_to_have_count(0)
    expect(page.get_by_role("button", name="Retry now")).to_be_visible()

    page.get_by_role("link", name="the endpoint's dead letters").click()
    page.wait_for_url("**/dead?endpoint=billing")
    expect(page.locator("h1")).to_have_text("Dead letters of billing")
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.locator("tbody")).to_contain_text("HTTP 503")
    # At 1,280 px the table fits the screen and the last error gets the room the other
    # columns leave: lines of prose, not a column of six-letter shreds.
    layout = page.evaluate("""() => {
        const cell = document.querySelector("tbody td.error").getBoundingClientRect();
        return {page: document.documentElement.scrollWidth, error: cell.width,
                lines: cell.height};
    }""")
    assert layout["page"] <= WIDTH, layout
    assert layout["error"] >= 0.25 * WIDTH, layout
    expect(page.locator("tbody td.error")).to_contain_text("status.billing.example")
    shots.take(page, "dead")

    page.get_by_role("link", name=event).click()
    page.wait_for_url(f"**/events/{event}")
    expect(page.locator("section.state-dead h2")).to_contain_text("billing: dead, 2 attempts")
    expect(page.locator("body")).not_to_contain_text("INV-1001")  # the payload: not asked
    shots.take(page, "event")

    page.get_by_role("button", name="Retry at billing").click()
    expect(page.locator(".done")).to_contain_text("Retried 1 dead delivery at billing")
    for _ in range(100):  # the dispatcher delivers it within moments
        if "billing: delivered" in page.locator("main").inner_text():
            break
        page.wait_for_timeout(200)
        page.reload()
    expect(page.locator("section.state-delivered h2")).to_contain_text("billing: delivered")
    shots.take(page, "event-delivered")

    page.get_by_role("searchbox").fill("customer-7")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**/search?q=customer-7")
    expect(page.locator("tbody tr")).to_have_count(4)
    shots.take(page, "search")

    page.get_by_role("link", name="Tenants").click()
    page.wait_for_url("**/tenants")
    expect(page.locator("h1")).to_have_text("Tenants")
    first = page.locator("tbody tr").first
    expect(first.locator("td").first).to_have_text("acme")  # 17 waiting at crm
    expect(first.locator("td").nth(2)).to_have_text("17")
    shots.take(page, "tenants")


def _one_line(page: Any, selector: str) -> dict[str, Any]:
    """How the first element matching ``selector`` is laid out: its text, its lines (the
    boxes of an inline element), whether its cell is cut or overflows, the page's width."""
    return page.evaluate("""(selector) => {
        const element = document.querySelector(selector);
        const cell = element.closest("td");
        const style = getComputedStyle(cell);
        return {text: element.textContent, lines: element.getClientRects().length,
                ellipsis: style.textOverflow === "ellipsis",
                overflows: cell.scrollWidth > cell.clientWidth,
                page: document.documentElement.scrollWidth};
    }""", selector)


def _support(page: Any, url: str, shots: Shots) -> None:
    """Support's path, at 1,400 px: a customer's name -> its endpoints, names whole ->
    its dead letter -> another customer's endpoint held by an open circuit -> Retry now,
    said as the command says it -> delivered."""
    expect = sync_api.expect
    page.set_viewport_size({"width": 1400, "height": HEIGHT})
    page.goto(url + "/")
    # Names whole and on one line where the table has room, among long errors.
    for name in (ACME, PARTNER):
        laid = _one_line(page, f'a[href="/endpoints/{name}"]')
        assert (laid["text"], laid["lines"], laid["ellipsis"], laid["overflows"]) == (
            name, 1, False, False), laid
        assert laid["page"] <= 1400, laid

    page.get_by_role("searchbox").fill("acme")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**/?tenant=acme")
    expect(page.locator("h1")).to_have_text("Endpoints of tenant acme")
    mine = page.locator("table.endpoints tbody tr")
    expect(mine).to_have_count(1)
    expect(mine.first.locator("td").first).to_have_text(ACME)
    waiting = page.locator("table.waits tbody tr")
    expect(waiting).to_have_count(1)
    expect(waiting.first).to_contain_text("crm")
    expect(waiting.first.locator("td").nth(1)).to_have_text(str(CRM_WAITING.count("acme")))
    shots.take(page, "tenant")

    page.get_by_role("link", name="its dead letters").click()
    page.wait_for_url("**/dead?tenant=acme")
    expect(page.locator("tbody tr")).to_have_count(1)
    # The dead letters' narrow column: the name whole, wrapped inside its cell, not cut.
    laid = _one_line(page, f'tbody a[href="/endpoints/{ACME}"]')
    assert (laid["text"], laid["ellipsis"], laid["overflows"]) == (ACME, False, False), laid
    assert laid["page"] <= 1400, laid

    page.goto(url + "/?tenant=globex")
    page.locator("table.endpoints").get_by_role("link", name=PARTNER).click()
    page.wait_for_url(f"**/endpoints/{PARTNER}")
    expect(page.locator("dd.circuit-open")).to_contain_text("open since")
    page.get_by_role("button", name="Retry now").click()
    expect(page.locator(".done")).to_have_text(
        f"Made 0 pending deliveries of endpoint {PARTNER} due now; its open circuit went "
        "half-open: the next request is the probe.")
    shots.take(page, "retry-now")
    for _ in range(100):  # the probe, then the rest, within moments
        caption = page.locator("figure.chart figcaption").inner_text()
        if f"{PARTNER_WAITING} delivered" in caption:
            break
        page.wait_for_timeout(200)
        page.reload()
    expect(page.locator("figure.chart figcaption")).to_contain_text(
        f"{PARTNER_WAITING} delivered")
    expect(page.locator("dd.circuit-closed")).to_have_text("closed")


def _tenants_pages(page: Any, url: str) -> None:
    """The tenants, 100 a page: the next page named in a Link header and a link; the
    second page holds the rest, with a link back to the largest backlogs."""
    expect = sync_api.expect
    answer = page.goto(url + "/tenants")
    assert answer is not None
    link = answer.headers["link"]
    assert re.fullmatch(r'</tenants\?after=[^>]+>; rel="next"', link), link
    rows = page.locator("table.tenants tbody tr")
    expect(rows).to_have_count(100)
    first = rows.locator("td:first-child").all_inner_texts()
    assert first[:3] == ["acme", "globex", "initech"]  # 17, 6 and 2 waiting at crm
    page.get_by_role("link", name="next 100 »").click()
    page.wait_for_url("**/tenants?after=*")
    expect(rows).to_have_count(3 + PAGED - 100)
    rest = rows.locator("td:first-child").all_inner_texts()
    assert not set(first) & set(rest)
    assert rest == sorted(rest)
    expect(page.get_by_role("link", name="next 100 »")).to_have_count(0)
    expect(page.get_by_role("link", name="« largest")).to_be_visible()
