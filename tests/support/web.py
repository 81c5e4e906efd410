"""The web view under test: its application on Starlette's client, against a test database.

The client speaks to the application in-process (no socket), through the
same guard, routes and connections ``outbox web`` serves; its requests are
addressed to 127.0.0.1, as a browser on the machine addresses them.
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

with warnings.catch_warnings():  # Starlette 1.x would rather drive httpx2; httpx serves
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from outbox.web.app import create_app
from outbox.web.config import WebConfig
from tests.support.cli import run_outbox
from tests.support.dispatcher import add_endpoint, publish

__all__ = ["BASE", "HEADER_VALUE", "PAYLOAD_MARK", "SECRET", "TestClient", "basic", "command",
           "dead_scene", "web_client"]

BASE = "http://127.0.0.1:8080"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HEADER_VALUE = "Bearer header-value-never-shown"
PAYLOAD_MARK = "payload-mark-shown-only-when-asked"


@contextmanager
def web_client(dsn: str, **settings: Any) -> Iterator[TestClient]:
    """The view's application with ``settings`` (WebConfig's), started and stopped."""
    app = create_app(WebConfig(dsn=dsn, **settings))
    with TestClient(app, base_url=BASE, follow_redirects=False) as client:
        yield client


def command(dsn: str, *args: str) -> Any:
    """What ``outbox ARGS --json`` prints, parsed."""
    done = run_outbox(dsn, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def basic(password: str, user: str = "outbox") -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def dead_scene(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """An endpoint with a secret and a header, a dead letter with an attempt history, a
    delivered event, a pending one; events with keys and an idempotency key."""
    add_endpoint(conn, "billing", "http://127.0.0.1:9/billing", events=("invoice.*",),
                 secret=SECRET, headers={"Authorization": HEADER_VALUE})
    add_endpoint(conn, "mail", "http://127.0.0.1:9/mail", events=("mail.*",))
    dead = publish(conn, "invoice.paid", {"card": PAYLOAD_MARK}, key="customer-7",
                   idempotency_key="order-1234", headers={"X-Customer-Token": HEADER_VALUE})
    delivered = publish(conn, "invoice.paid", {"card": PAYLOAD_MARK}, key="customer-7")
    pending = publish(conn, "mail.sent", {"to": PAYLOAD_MARK})
    conn.execute(
        "UPDATE outbox.deliveries SET state = 'dead', attempts = 2, last_status = 503, "
        "last_error = 'HTTP 503 from receiver: overloaded', finished_at = now() "
        "WHERE event_id = %s", (dead,))
    conn.execute(
        "INSERT INTO outbox.attempts (delivery_id, attempt, at, status, reason, "
        "duration_seconds, error) SELECT id, n, now() - make_interval(secs => 10 - n), 503, "
        "'http_5xx', 0.012, 'HTTP 503 from receiver: overloaded' "
        "FROM outbox.deliveries, generate_series(1, 2) AS n WHERE event_id = %s", (dead,))
    conn.execute(
        "UPDATE outbox.deliveries SET state = 'delivered', attempts = 1, last_status = 200, "
        "finished_at = now(), last_duration_seconds = 0.004 WHERE event_id = %s",
        (delivered,))
    conn.commit()
    return {"dead": dead, "delivered": delivered, "pending": pending}
