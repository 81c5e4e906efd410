"""The receiving examples of docs/receiving.md, run as shown under real HTTP servers."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import httpx
import psycopg
import pytest

import outbox
from outbox._shared.wire import sign
from outbox.testing import signed_batch, signed_request
from tests.support.receiving import EXAMPLES, effects, load_example, serve_asgi, serve_wsgi
from tests.support.resilience import Fleet, add_endpoint, all_delivered, wait_until

SECRET = "whsec_" + base64.b64encode(b"the receiver's secret, 32 bytes!").decode()
OLD = "whsec_" + base64.b64encode(b"the previous secret, 32 bytes!!!").decode()
WRONG = "whsec_" + base64.b64encode(b"not the receiver's secret at all").decode()
DOC = EXAMPLES.parent / "receiving.md"

Serve = Callable[[Any], AbstractContextManager[str]]
# (example module, how to serve its app, its business table, its consumer name)
APPS = {"starlette": ("receive_starlette", serve_asgi, "shipments", "shipping"),
        "flask": ("receive_flask", serve_wsgi, "invoices", "billing")}


@pytest.fixture(params=sorted(APPS))
def app(request: pytest.FixtureRequest, receiver_db: str) -> Iterator[tuple[str, str, str]]:
    """One example served for real: (its /hooks URL, its business table, its consumer)."""
    module_name, serve, table, consumer = APPS[request.param]
    module = load_example(module_name, {"WEBHOOK_SECRETS": f"{SECRET} {OLD}",
                                        "DATABASE_URL": receiver_db})
    with serve(module.app) as base:
        yield f"{base}/hooks", table, consumer


def post(url: str, headers: dict[str, str], body: bytes) -> int:
    return httpx.post(url, content=body, headers=headers, timeout=10).status_code


def inbox(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [(str(c), str(e)) for c, e in
                conn.execute("SELECT consumer, event_id FROM outbox.inbox ORDER BY 2")]


def test_the_doc_shows_the_tested_examples_verbatim() -> None:
    """docs/receiving.md holds each example file whole, in a python code block."""
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    for name in ("receive_starlette", "receive_flask"):
        assert (EXAMPLES / f"{name}.py").read_text() in blocks, name


def test_a_delivery_is_done_once_however_often_it_arrives(
        app: tuple[str, str, str], receiver_db: str) -> None:
    """The same delivery three times: 204 each time, one effect, one inbox record."""
    url, table, consumer = app
    request = signed_request(SECRET, "order.created", {"order_id": 7})
    for _ in range(3):
        assert post(url, request.headers, request.body) == 204
    event_id = request.events[0].id
    assert effects(receiver_db, table) == [(7, event_id)]
    assert inbox(receiver_db) == [(consumer, event_id)]


def test_a_batch_does_each_event_once(app: tuple[str, str, str], receiver_db: str) -> None:
    """A CloudEvents batch, then a single delivery of one of its events: each effect once."""
    url, table, _ = app
    one = signed_request(OLD, "order.created", {"order_id": 1}, format="cloudevents")
    two = signed_request(OLD, "order.created", {"order_id": 2})
    batch = signed_batch(SECRET, [*one.events, *two.events], format="cloudevents")
    assert post(url, batch.headers, batch.body) == 204
    assert post(url, one.headers, one.body) == 204
    assert effects(receiver_db, table) == [(1, one.events[0].id), (2, two.events[0].id)]


def test_a_bad_signature_is_401_and_changes_nothing(
        app: tuple[str, str, str], receiver_db: str) -> None:
    """Wrong secret, no signature, or a stale timestamp: 401, no effect, no record."""
    url, table, _ = app
    wrong = signed_request(WRONG, "order.created", {"order_id": 3})
    assert post(url, wrong.headers, wrong.body) == 401
    unsigned = {k: v for k, v in wrong.headers.items() if k != "webhook-signature"}
    assert post(url, unsigned, wrong.body) == 401
    stale = signed_request(SECRET, "order.created", {"order_id": 3}, timestamp=0)
    assert post(url, stale.headers, stale.body) == 401
    assert effects(receiver_db, table) == []
    assert inbox(receiver_db) == []


def test_a_signed_request_that_is_no_delivery_is_400(
        app: tuple[str, str, str], receiver_db: str) -> None:
    """Correctly signed but not an event: 400 (a 4xx: dead-lettered), nothing recorded."""
    url, _, _ = app
    good = signed_request(SECRET, "order.created", {"order_id": 4})
    body = json.dumps({"hello": "world"}).encode()
    stamp = int(good.headers["webhook-timestamp"])
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    headers = {**good.headers,
               "webhook-signature": sign(key, good.headers["webhook-id"], stamp, body)}
    assert post(url, headers, body) == 400
    assert inbox(receiver_db) == []


def test_a_failure_is_5xx_and_rolls_back_so_the_retry_does_the_work(
        app: tuple[str, str, str], receiver_db: str) -> None:
    """The work fails: 5xx, no record kept; once fixed, the same delivery is done, once."""
    url, table, consumer = app
    request = signed_request(SECRET, "order.created", {"order_id": 5})
    with psycopg.connect(receiver_db, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
        assert post(url, request.headers, request.body) == 500
        assert inbox(receiver_db) == []  # the record rolled back with the failed work
        conn.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
    assert post(url, request.headers, request.body) == 204
    assert post(url, request.headers, request.body) == 204
    assert effects(receiver_db, table) == [(5, request.events[0].id)]
    assert inbox(receiver_db) == [(consumer, request.events[0].id)]


@pytest.mark.parametrize(("fmt", "max_batch"), [("standard-webhooks", 1), ("cloudevents", 1),
                                                ("standard-webhooks", 10), ("cloudevents", 10)])
def test_the_real_dispatcher_delivers_to_the_examples_in_every_format(
        app: tuple[str, str, str], receiver_db: str, dsn: str, fleet: Fleet,
        fmt: str, max_batch: int) -> None:
    """The dispatcher's own requests, single or batched, either format: each order once."""
    url, table, consumer = app
    add_endpoint(dsn, url, secret=OLD, format=fmt, max_batch=max_batch)
    with psycopg.connect(dsn) as conn:
        ids = [str(i) for i in outbox.publish_many(conn, [
            outbox.Event("order.created", {"order_id": n}, key="caf\u00e9 %" if n % 2 else None)
            for n in range(1, 8)])]
        conn.commit()
    fleet.start()
    wait_until(lambda: all_delivered(dsn, 7), 30, "every event delivered")
    assert effects(receiver_db, table) == [(n, i) for n, i in enumerate(ids, 1)]
    assert sorted(inbox(receiver_db)) == sorted((consumer, i) for i in ids)
