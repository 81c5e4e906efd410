"""The web view's guards and actions on a real PostgreSQL: retry and discard with a token
bound to the browser's cookie, refusals that change nothing, basic authentication."""

from __future__ import annotations

import logging
import re
from typing import Any

import psycopg
import pytest

from tests.support.admin import snapshot
from tests.support.dispatcher import delivery
from tests.support.web import TestClient, basic, dead_scene, web_client

Conn = psycopg.Connection[Any]


@pytest.fixture
def scene(conn: Conn) -> dict[str, Any]:
    return dead_scene(conn)


def form_token(client: TestClient, event: object) -> str:
    """The token of the event page's forms (the page sets the cookie it is bound to)."""
    page = client.get(f"/events/{event}")
    assert page.status_code == 200
    found = re.search(r'name="token" value="([0-9a-f]+)"', page.text)
    assert found, "no form on the page"
    return found.group(1)


def test_read_only_by_default_every_post_refused(dsn: str, conn: Conn,
                                                 scene: dict[str, Any]) -> None:
    """Without --allow-actions the page has no forms and any POST is a 403 changing nothing."""
    before = snapshot(conn)
    with web_client(dsn) as client:
        page = client.get(f"/events/{scene['dead']}")
        refused = [client.post(f"/events/{scene['dead']}/{verb}",
                               data={"endpoint": "billing", "token": "x"})
                   for verb in ("retry", "discard")]
        elsewhere = client.post("/", data={})
    assert "<form method=\"post\"" not in page.text
    assert "outbox_csrf" not in page.headers.get("set-cookie", "")
    assert [r.status_code for r in refused] == [403, 403]
    assert "read-only" in refused[0].text
    assert elsewhere.status_code == 403
    assert snapshot(conn) == before


def test_retry_with_the_pages_token(dsn: str, conn: Conn, scene: dict[str, Any],
                                    caplog: pytest.LogCaptureFixture) -> None:
    """With --allow-actions the dead delivery's retry form puts it back to pending, says
    so on the event's page, and logs what it did."""
    with web_client(dsn, allow_actions=True) as client:
        token = form_token(client, scene["dead"])
        assert client.cookies.get("outbox_csrf")
        with caplog.at_level(logging.INFO, logger="outbox.web"):
            done = client.post(f"/events/{scene['dead']}/retry",
                               data={"endpoint": "billing", "token": token})
        assert done.status_code == 303
        after = client.get(done.headers["location"])
    assert delivery(conn, scene["dead"])["state"] == "pending"
    assert "Retried 1 dead delivery at billing" in after.text
    assert "billing: pending" in after.text
    assert any(f"retried 1 dead delivery of event {scene['dead']} at endpoint 'billing'"
               in r.getMessage() for r in caplog.records)


def test_discard_with_the_pages_token(dsn: str, conn: Conn, scene: dict[str, Any]) -> None:
    """The discard form removes the dead delivery, as `outbox dead discard` does."""
    with web_client(dsn, allow_actions=True) as client:
        token = form_token(client, scene["dead"])
        done = client.post(f"/events/{scene['dead']}/discard",
                           data={"endpoint": "billing", "token": token})
        after = client.get(done.headers["location"])
    assert done.status_code == 303
    assert "Discarded 1 dead delivery at billing" in after.text
    rows = conn.execute("SELECT count(*) FROM outbox.deliveries WHERE event_id = %s",
                        (scene["dead"],)).fetchone()
    conn.commit()
    assert rows == (0,)


@pytest.mark.parametrize("forgery", ["missing", "wrong", "no cookie", "another cookie"])
def test_a_post_without_its_token_is_refused_and_changes_nothing(
        dsn: str, conn: Conn, scene: dict[str, Any], forgery: str) -> None:
    """A missing or wrong token, or a right one without its cookie, is a 403: nothing changes."""
    before = snapshot(conn)
    with web_client(dsn, allow_actions=True) as client:
        token = form_token(client, scene["dead"])
        data = {"endpoint": "billing", "token": token}
        if forgery == "missing":
            del data["token"]
        elif forgery == "wrong":
            data["token"] = "0" * len(token)
        elif forgery == "no cookie":
            client.cookies.clear()
        else:
            client.cookies.set("outbox_csrf", "someone-elses-cookie")
        for verb in ("retry", "discard"):
            refused = client.post(f"/events/{scene['dead']}/{verb}", data=data)
            assert refused.status_code == 403, verb
            assert "token" in refused.text
    assert snapshot(conn) == before


def test_a_removed_endpoints_dead_letter_is_discarded_not_retried(
        dsn: str, conn: Conn, scene: dict[str, Any]) -> None:
    """A dead letter of a removed endpoint offers discard only; a forged retry is a 409."""
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE name = 'billing'")
    conn.commit()
    before = snapshot(conn)
    with web_client(dsn, allow_actions=True) as client:
        page = client.get(f"/events/{scene['dead']}")
        token = form_token(client, scene["dead"])
        retry = client.post(f"/events/{scene['dead']}/retry",
                            data={"endpoint": "billing", "token": token})
    assert "/discard" in page.text
    assert "/retry" not in page.text
    assert retry.status_code == 409
    assert snapshot(conn) == before


def test_the_password_is_asked_by_basic_authentication(dsn: str,
                                                       scene: dict[str, Any]) -> None:
    """With a password every address answers 401 until user outbox gives it."""
    with web_client(dsn, password="s3cret pass") as client:
        asked = client.get("/")
        wrong = client.get("/", headers=basic("wrong"))
        other_user = client.get("/", headers=basic("s3cret pass", user="admin"))
        garbled = client.get("/", headers={"Authorization": "Basic !!!"})
        right = [client.get(path, headers=basic("s3cret pass"))
                 for path in ("/", "/dead", f"/events/{scene['dead']}", "/static/style.css")]
        post = client.post(f"/events/{scene['dead']}/retry", data={})
    assert asked.status_code == wrong.status_code == other_user.status_code == 401
    assert garbled.status_code == 401
    assert asked.headers["www-authenticate"].startswith('Basic realm="outbox"')
    assert [r.status_code for r in right] == [200] * 4
    assert post.status_code == 401


def test_wrong_passwords_are_throttled_and_a_request_without_one_is_asked(dsn: str) -> None:
    """Past ten wrong passwords in a minute every request giving one is answered 429 with
    Retry-After (the right one too, so a guess learns nothing); one giving none is asked
    for it (401), as a browser's first request is."""
    with web_client(dsn, password="s3cret pass") as client:
        wrong = [client.get("/", headers=basic(f"guess {n}")).status_code for n in range(10)]
        throttled = client.get("/", headers=basic("guess 11"))
        right = client.get("/", headers=basic("s3cret pass"))
        asked = client.get("/")
    assert wrong == [401] * 10
    assert throttled.status_code == right.status_code == 429
    assert 1 <= int(throttled.headers["retry-after"]) <= 60
    assert asked.status_code == 401


def test_the_form_cookie_is_secure_when_the_page_came_over_https(
        dsn: str, scene: dict[str, Any]) -> None:
    """The form token's cookie is HttpOnly and SameSite=Strict always, and Secure when the
    page was asked over HTTPS, directly or through a proxy that says so."""
    with web_client(dsn, allow_actions=True) as client:
        plain = client.get(f"/events/{scene['dead']}").headers["set-cookie"]
        client.cookies.clear()
        proxied = client.get(f"/events/{scene['dead']}",
                             headers={"X-Forwarded-Proto": "https"}).headers["set-cookie"]
    assert "HttpOnly" in plain
    assert "SameSite=strict" in plain
    assert "Secure" not in plain
    assert "Secure" in proxied


def test_a_loopback_view_refuses_requests_addressed_to_other_names(dsn: str) -> None:
    """Bound to loopback, a request whose Host is another name (DNS rebinding) is refused."""
    with web_client(dsn) as client:
        rebound = client.get("/", headers={"Host": "attacker.example:8080"})
        local = [client.get("/", headers={"Host": host})
                 for host in ("localhost:8080", "127.0.0.1", "[::1]:8080")]
    assert rebound.status_code == 421
    assert [r.status_code for r in local] == [200, 200, 200]
