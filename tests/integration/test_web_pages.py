"""The web view's pages on a real PostgreSQL: what each shows, its JSON equal to the command's
``--json``, filters and keyset pages, and nothing secret on any of them."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from outbox.web.db import NoConnection, Pool
from tests.support.admin import set_state
from tests.support.dispatcher import add_endpoint, publish
from tests.support.web import (
    HEADER_VALUE,
    PAYLOAD_MARK,
    SECRET,
    command,
    dead_scene,
    web_client,
)

Conn = psycopg.Connection[Any]


@pytest.fixture
def scene(conn: Conn) -> dict[str, Any]:
    return dead_scene(conn)


def without_ages(status: dict[str, Any]) -> dict[str, Any]:
    """status --json without what moves between two reads (the oldest pending age)."""
    for endpoint in status["endpoints"]:
        endpoint.pop("oldest_pending_seconds")
    return status


def test_overview_shows_each_endpoint_as_status_does(dsn: str, scene: dict[str, Any]) -> None:
    """`/` lists the endpoints with their counts, links to their dead letters, and says how
    old its counts are; its JSON is `outbox status --json`."""
    with web_client(dsn) as client:
        page = client.get("/")
        doc = client.get("/?format=json")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert 'href="/dead?endpoint=billing"' in page.text
    assert "dispatchers alive" in page.text
    assert int(page.headers["age"]) >= 0
    assert doc.headers["content-type"].startswith("application/json")
    assert without_ages(doc.json()) == without_ages(command(dsn, "status"))
    billing = next(e for e in doc.json()["endpoints"] if e["name"] == "billing")
    assert (billing["dead"], billing["delivered"]) == (1, 1)


def test_overview_names_the_dispatcher_serving_an_idle_database(dsn: str, conn: Conn) -> None:
    """A fleet's look at an idle database (its row's serves_until ahead): `/` says who
    serves it, and not that nothing is delivered; its JSON carries served_by."""
    conn.execute("INSERT INTO outbox.dispatchers (id, host, pid, version, seen_at, "
                 "serves_until) VALUES (%s, 'fleet-7', 4242, 'x', "
                 "now() - interval '50 seconds', now() + interval '40 seconds')",
                 (uuid.uuid4(),))
    conn.commit()
    with web_client(dsn) as client:
        page = client.get("/")
        doc = client.get("/?format=json").json()
    assert "fleet-7 (pid 4242)" in page.text
    assert "nothing is delivered" not in page.text
    assert doc["served_by"] == [{"host": "fleet-7", "pid": 4242}]
    assert doc["dispatchers"] == 1


def test_dead_letters_page_and_json(dsn: str, scene: dict[str, Any]) -> None:
    """`/dead` lists the dead letter with its error and a link to its event; its JSON is
    `outbox dead list --json`, filters and all."""
    with web_client(dsn) as client:
        page = client.get("/dead")
        assert page.status_code == 200
        assert f'href="/events/{scene["dead"]}"' in page.text
        assert "HTTP 503 from receiver: overloaded" in page.text
        for query, args in [("", ()), ("?endpoint=billing", ("--endpoint", "billing")),
                            ("?type=invoice.*&tenant=", ("--type", "invoice.*")),
                            ("?since=1h&until=2999-01-01", ("--since", "1h", "--until",
                                                            "2999-01-01"))]:
            sep = "&" if query else "?"
            doc = client.get(f"/dead{query}{sep}format=json").json()
            assert doc == command(dsn, "dead", "list", *args), query
            assert [d["event_id"] for d in doc] == [str(scene["dead"])]
        assert client.get("/dead?endpoint=mail&format=json").json() == []
        assert client.get("/dead?type=mail.*&format=json").json() == []


@pytest.mark.parametrize(("query", "words"), [
    ("since=yesterday", "since: invalid time"),
    ("until=2020", "bare number"),
    ("type=no%20spaces", "type: invalid pattern"),
    ("since=1h&until=2h", "window is empty"),
    ("limit=0", "limit"),
    ("before=nonsense", "before"),
    ("tenant=" + "x" * 300, "tenant"),
])
def test_bad_filters_are_a_400_with_the_commands_words(dsn: str, query: str,
                                                       words: str) -> None:
    """A filter the command would refuse (exit 2) is a 400 saying why, as a page and as JSON."""
    with web_client(dsn) as client:
        page = client.get(f"/dead?{query}")
        doc = client.get(f"/dead?{query}&format=json")
    assert page.status_code == doc.status_code == 400
    assert words in page.text
    assert words in doc.json()["error"]


def test_an_unknown_endpoint_is_a_404(dsn: str) -> None:
    """`/dead?endpoint=NAME` for a name no endpoint ever had says so (the command's exit 1)."""
    with web_client(dsn) as client:
        response = client.get("/dead?endpoint=nobody")
    assert response.status_code == 404
    assert "no endpoint named nobody" in response.text


def test_dead_letters_in_keyset_pages(dsn: str, conn: Conn) -> None:
    """Pages of `/dead` follow each other by their `next` links, newest first, each row once."""
    add_endpoint(conn, "a", "http://127.0.0.1:9/a")
    events = [publish(conn, "mail.sent", {"n": n}) for n in range(7)]
    for n, event in enumerate(events):
        set_state(conn, event, "a", "dead", error="boom", finished_ago=f"{n} minutes")
    seen: list[str] = []
    with web_client(dsn, page_size=3) as client:
        url: str | None = "/dead?format=json"
        while url is not None:
            response = client.get(url)
            seen += [d["event_id"] for d in response.json()]
            url = response.links.get("next", {}).get("url")
        html = client.get("/dead")
        older = html.text.split('rel="next" href="')[1].split('"')[0].replace("&amp;", "&")
        second = client.get(older)
    assert seen == [str(e) for e in events]
    assert str(events[3]) in second.text
    assert str(events[0]) not in second.text
    assert "« newest" in second.text


def test_event_page_tells_the_story_as_show_does(dsn: str, scene: dict[str, Any]) -> None:
    """`/events/ID` shows every attempt with its error and the trace; JSON: `outbox show`."""
    event = str(scene["dead"])
    with web_client(dsn) as client:
        page = client.get(f"/events/{event}")
        doc = client.get(f"/events/{event}?format=json").json()
        with_payload = client.get(f"/events/{event}?format=json&payload=1").json()
    assert page.status_code == 200
    assert "billing: dead, 2 attempts" in page.text
    assert page.text.count("HTTP 503 from receiver: overloaded") == 2
    assert "customer-7" in page.text
    assert doc == command(dsn, "show", event)
    assert with_payload == command(dsn, "show", event, "--payload")
    assert with_payload["payload"] == {"card": PAYLOAD_MARK}


def test_the_payload_only_when_asked_on_the_events_page(dsn: str,
                                                         scene: dict[str, Any]) -> None:
    """The payload is on an event's page only with ?payload=1."""
    with web_client(dsn) as client:
        hidden = client.get(f"/events/{scene['dead']}")
        shown = client.get(f"/events/{scene['dead']}?payload=1")
    assert PAYLOAD_MARK not in hidden.text
    assert 'href="?payload=1"' in hidden.text
    assert PAYLOAD_MARK in shown.text


@pytest.mark.parametrize("path", ["/events/0190a5b2-0000-7000-8000-000000000000",
                                  "/events/not-a-uuid"])
def test_an_unknown_event_is_a_404(dsn: str, path: str) -> None:
    """An id no event has, or no id at all, is a 404, as a page and as JSON."""
    with web_client(dsn) as client:
        page = client.get(path)
        doc = client.get(path + "?format=json")
    assert page.status_code == doc.status_code == 404
    assert "error" in doc.json()


def test_search_by_id_idempotency_key_and_ordering_key(dsn: str,
                                                       scene: dict[str, Any]) -> None:
    """`/search` finds an event by its id or idempotency key (and opens it), and the events
    of an ordering key (listed as `outbox events list --key` lists them)."""
    dead = str(scene["dead"])
    with web_client(dsn) as client:
        by_id = client.get(f"/search?q={dead}")
        by_idempotency = client.get("/search?q=order-1234")
        by_key = client.get("/search?q=customer-7")
        by_key_json = client.get("/search?q=customer-7&format=json").json()
        by_id_json = client.get(f"/search?q={dead}&format=json").json()
        nothing = client.get("/search?q=no-such-thing")
        empty = client.get("/search")
        empty_json = client.get("/search?format=json")
    assert by_id.status_code == by_idempotency.status_code == 303
    assert by_id.headers["location"] == by_idempotency.headers["location"] == f"/events/{dead}"
    assert by_key.status_code == 200
    assert dead in by_key.text
    assert str(scene["delivered"]) in by_key.text
    assert by_key_json == command(dsn, "events", "list", "--key", "customer-7")
    assert [e["event_id"] for e in by_id_json] == [dead]
    assert nothing.status_code == 200
    assert "No event has" in nothing.text
    assert empty.status_code == 200
    assert empty_json.status_code == 400


def test_no_secret_header_value_or_payload_on_any_page(dsn: str,
                                                       scene: dict[str, Any]) -> None:
    """Neither the endpoint's secret nor a header value shows anywhere, nor a payload
    unless asked for on its event's page."""
    paths = ["/", "/?format=json", "/dead", "/dead?format=json", "/dead?endpoint=billing",
             "/search?q=customer-7", "/search?q=customer-7&format=json", "/static/style.css"]
    for event in scene.values():
        paths += [f"/events/{event}", f"/events/{event}?format=json"]
    with web_client(dsn, allow_actions=True) as client:
        for path in paths:
            response = client.get(path)
            assert response.status_code == 200, path
            for secret in (SECRET, SECRET.removeprefix("whsec_"), HEADER_VALUE, PAYLOAD_MARK):
                assert secret not in response.text, (path, secret)
                assert secret not in str(response.headers), (path, secret)
        asked = client.get(f"/events/{scene['dead']}?payload=1")
    assert PAYLOAD_MARK in asked.text
    assert SECRET not in asked.text
    assert HEADER_VALUE not in asked.text


def test_every_response_forbids_framing_scripts_and_caching(dsn: str) -> None:
    """The pages run no script, cannot be framed by another site, and are not cached."""
    with web_client(dsn) as client:
        response = client.get("/")
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_stored_control_characters_are_shown_not_obeyed(dsn: str, conn: Conn) -> None:
    """An error holding a bidi override or an escape sequence is shown escaped, and HTML in
    it is text."""
    add_endpoint(conn, "a", "http://127.0.0.1:9/a")
    event = publish(conn, "mail.sent", {})
    set_state(conn, event, "a", "dead", error="<script>x</script>\u202eevil\x1b[2J")
    with web_client(dsn) as client:
        page = client.get("/dead").text
    assert "<script>x" not in page
    assert "&lt;script&gt;x&lt;/script&gt;\\u202eevil\\x1b[2J" in page


def test_the_views_connections_read_only_under_a_statement_timeout(dsn: str, conn: Conn,
                                                                   ) -> None:
    """The readers' sessions are read-only, with the view's statement timeout, and name
    themselves in pg_stat_activity."""
    with web_client(dsn, statement_timeout_seconds=1.5) as client:
        assert client.get("/dead").status_code == 200
        rows = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-web' "
            "AND datname = current_database()").fetchone()
    assert rows is not None
    assert rows[0] >= 1
    pool = Pool(dsn, size=1, statement_timeout=1.5, read_only=True, wait=1)
    with pool.connection() as reader:
        settings = reader.execute("SELECT current_setting('statement_timeout'), "
                                  "current_setting('default_transaction_read_only')").fetchone()
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            reader.execute("DELETE FROM outbox.events")
    pool.close()
    assert settings == ("1500ms", "on")


def test_a_statement_past_its_timeout_is_a_503(dsn: str, conn: Conn) -> None:
    """A page whose statement runs past the view's statement timeout says so (503)."""
    add_endpoint(conn, "a", "http://127.0.0.1:9/a")
    conn.execute("LOCK TABLE outbox.events IN ACCESS EXCLUSIVE MODE")  # held: reads wait
    try:
        with web_client(dsn, statement_timeout_seconds=0.3) as client:
            response = client.get(f"/events/{uuid.uuid4()}")
    finally:
        conn.rollback()
    assert response.status_code == 503
    assert "statement timeout" in response.text


def test_a_request_waits_a_bounded_time_for_a_busy_connection(dsn: str) -> None:
    """The readers' pool: its connections are the view's, read-only and under the timeout;
    with every one of them busy, the next waiter gives up after its wait (a 503 page)."""
    pool = Pool(dsn, size=1, statement_timeout=1.0, read_only=True, wait=0.2)
    try:
        with pool.connection() as conn:
            row = conn.execute("SELECT current_setting('statement_timeout'), "
                               "current_setting('default_transaction_read_only'), "
                               "current_setting('application_name')").fetchone()
            assert row == ("1s", "on", "outbox-web")
            with pytest.raises(NoConnection), pool.connection():
                pass
        with pool.connection() as conn:  # given back, and reused
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_searches_hold_at_most_half_the_connections(dsn: str) -> None:
    """While searches hold their share of the connections, another search is a 503 at once
    (not queued) and every other page is still served."""
    with web_client(dsn) as client:
        slots = client.app.state.parts.searches  # type: ignore[attr-defined]
        held = 0
        while slots.acquire(blocking=False):
            held += 1
        assert held == 2  # half of the 4 reading connections
        try:
            busy = client.get("/search?q=customer-7&format=json")
            assert busy.status_code == 503
            assert "search" in busy.text
            assert client.get("/").status_code == 200
        finally:
            for _ in range(held):
                slots.release()
        assert client.get("/search?q=customer-7&format=json").status_code == 200
