"""The web view in a real browser: an operator follows an endpoint to its dead letter,
retries it, and sees it delivered.

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
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, wait_for_state
from tests.support.web_server import web_server

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed "
                               "(pip install playwright; the test extra has it)")

WIDTH, HEIGHT = 1280, 720


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
    """Overview -> the endpoint's page -> its dead letters -> the event -> Retry ->
    delivered; the search and the tenants' page."""
    browser_path = chromium()
    shots = Shots(tmp_path / "screenshots")
    billing_up = False

    def respond(request: Request) -> Response:
        if request.path.startswith("/billing") and not billing_up:
            return Response(503, body=b"billing is down for maintenance until 16:00 UTC, see "
                            b"https://status.billing.example/incidents/2026-12-03-4711")
        return Response(200)

    with Receiver(respond) as receiver:
        add_endpoint(conn, "billing", receiver.url + "billing", events=("invoice.*",),
                     max_attempts=2, secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        add_endpoint(conn, "mail", receiver.url + "mail", events=("mail.*",))
        for n in range(3):
            publish(conn, "mail.sent", {"n": n}, key="customer-7")
        event = publish(conn, "invoice.paid", {"invoice": "INV-1001", "cents": 4200},
                        key="customer-7", idempotency_key="order-1001")
        with Dispatcher(dsn) as dispatcher:
            wait_for_state(conn, event, "dead", dispatcher=dispatcher)
            billing_up = True
            with web_server(dsn, "--allow-actions") as url, \
                    sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=browser_path, headless=True,
                    args=["--no-sandbox"] if os.geteuid() == 0 else [])
                try:
                    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
                    _walk(page, url, str(event), shots)
                finally:
                    browser.close()
            delivered = wait_for_state(conn, event, "delivered", dispatcher=dispatcher)
    assert delivered["attempts"] == 1
    assert {p.name for p in shots.folder.iterdir()} == {
        "web-overview.png", "web-dead.png", "web-event.png", "web-event-delivered.png",
        "web-search.png", "web-endpoint.png", "web-tenants.png"}
    print(f"screenshots: {shots.folder}")


def _walk(page: Any, url: str, event: str, shots: Shots) -> None:
    """What the operator does, page by page, each page photographed."""
    expect = sync_api.expect
    page.goto(url + "/")
    expect(page.locator("h1")).to_have_text("Endpoints")
    expect(page.locator("tr", has_text="billing")).to_contain_text("1")
    shots.take(page, "overview")

    expect(page.locator("tr", has_text="billing")).to_contain_text("last failure: HTTP 503")
    page.get_by_role("link", name="billing", exact=True).click()
    page.wait_for_url("**/endpoints/billing")
    expect(page.locator("h1")).to_have_text("Endpoint billing")
    expect(page.locator("table").first).to_contain_text("HTTP 503")
    chart = page.locator("figure.chart svg")
    expect(chart).to_be_visible()
    expect(chart.locator("rect.failed")).not_to_have_count(0)
    assert chart.bounding_box()["height"] > 40
    expect(page.get_by_role("button", name="Retry now")).to_be_visible()
    shots.take(page, "endpoint")

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
    shots.take(page, "tenants")
