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

from outbox.sql import QueryName, queries
from outbox.web.app import create_app
from outbox.web.config import WebConfig
from tests.support.cli import run_outbox
from tests.support.dispatcher import add_endpoint, publish

__all__ = ["BASE", "HEADER_VALUE", "PAYLOAD_MARK", "SECRET", "TestClient", "basic", "command",
           "dead_scene", "plans", "tenants_history", "web_client"]

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


def tenants_history(conn: psycopg.Connection[Any]) -> None:
    """40 endpoints, every other one a tenant's, and 60,000 delivered deliveries of seven
    tenants over them with 50 pending: a table where a read that walks the history
    instead of the backlog shows it in its plan (analysed)."""
    conn.execute("INSERT INTO outbox.endpoints (name, url, tenant) SELECT 'ep' || g, "
                 "'https://x/', CASE WHEN g % 2 = 0 THEN 'tenant-' || g END "
                 "FROM generate_series(1, 40) g")
    conn.execute("INSERT INTO outbox.events (id, type, payload) VALUES "
                 "('00000000-0000-7000-8000-000000000001', 't', '{}')")
    conn.execute("""
        INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, finished_at, tenant)
        SELECT '00000000-0000-7000-8000-000000000001', e.id, g,
               CASE WHEN g <= 60000 THEN 'delivered' ELSE 'pending' END,
               CASE WHEN g <= 60000 THEN now() END, 'tenant-' || g % 7
        FROM generate_series(1, 60050) g
        JOIN outbox.endpoints e ON e.name = 'ep' || (1 + g % 40)""")
    conn.execute("ANALYZE outbox.deliveries")
    conn.commit()


def plans(conn: psycopg.Connection[Any], reads: dict[QueryName, dict[str, Any]],
          ) -> dict[str, str]:
    """The plan of each named query (``queries[NAME]``) with its parameters, as text."""
    found: dict[str, str] = {}
    with conn.cursor() as cur:
        for name, params in reads.items():
            found[name] = "\n".join(row[0] for row in cur.execute(
                "EXPLAIN " + queries[name], params, prepare=False).fetchall())
    conn.rollback()
    return found
