"""The receiving examples of docs/receiving.md, run as shown under real HTTP servers."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
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
APPS = {"starlette": ("receive_starlette", serve_asgi, "mail_notices", "notify"),
        "flask": ("receive_flask", serve_wsgi, "mail_archive", "archive")}


@dataclass(frozen=True)
class Example:
    """One example app: ``url(format)`` serves it for real in that format, its /hooks URL."""

    url: Callable[..., str]
    table: str
    consumer: str


@pytest.fixture(params=sorted(APPS))
def example(request: pytest.FixtureRequest, receiver_db: str) -> Iterator[Example]:
    """One example, served on demand with the environment its docs name, for the test's length."""
    module_name, serve, table, consumer = APPS[request.param]
    with contextlib.ExitStack() as stack:
        def url(fmt: str = "standard-webhooks") -> str:
            module = load_example(module_name, {"WEBHOOK_SECRETS": f"{SECRET} {OLD}",
                                                "WEBHOOK_FORMAT": fmt,
                                                "DATABASE_URL": receiver_db})
            return f"{stack.enter_context(serve(module.app))}/hooks"
        yield Example(url, table, consumer)


@pytest.fixture
def app(example: Example) -> tuple[str, str, str]:
    """The example served for a Standard Webhooks endpoint: (its /hooks URL, table, consumer)."""
    return example.url(), example.table, example.consumer


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
    request = signed_request(SECRET, "mail.received", {"message_id": 7})
    for _ in range(3):
        assert post(url, request.headers, request.body) == 204
    event_id = request.events[0].id
    assert effects(receiver_db, table) == [(7, event_id)]
    assert inbox(receiver_db) == [(consumer, event_id)]


def test_a_batch_does_each_event_once(example: Example, receiver_db: str) -> None:
    """A CloudEvents batch, then a single delivery of one of its events: each effect once."""
    url, table = example.url("cloudevents"), example.table
    one = signed_request(OLD, "mail.received", {"message_id": 1}, format="cloudevents")
    two = signed_request(OLD, "mail.received", {"message_id": 2})
    batch = signed_batch(SECRET, [*one.events, *two.events], format="cloudevents")
    assert post(url, batch.headers, batch.body) == 204
    assert post(url, one.headers, one.body) == 204
    assert effects(receiver_db, table) == [(1, one.events[0].id), (2, two.events[0].id)]


def test_a_bad_signature_is_401_and_changes_nothing(
        app: tuple[str, str, str], receiver_db: str) -> None:
    """Wrong secret, no signature, or a stale timestamp: 401, no effect, no record."""
    url, table, _ = app
    wrong = signed_request(WRONG, "mail.received", {"message_id": 3})
    assert post(url, wrong.headers, wrong.body) == 401
    unsigned = {k: v for k, v in wrong.headers.items() if k != "webhook-signature"}
    assert post(url, unsigned, wrong.body) == 401
    stale = signed_request(SECRET, "mail.received", {"message_id": 3}, timestamp=0)
    assert post(url, stale.headers, stale.body) == 401
    assert effects(receiver_db, table) == []
    assert inbox(receiver_db) == []


def test_a_signed_request_that_is_no_delivery_is_400(
        app: tuple[str, str, str], receiver_db: str) -> None:
    """Correctly signed but not an event: 400 (a 4xx: dead-lettered), nothing recorded."""
    url, _, _ = app
    good = signed_request(SECRET, "mail.received", {"message_id": 4})
    body = json.dumps({"hello": "world"}).encode()
    stamp = int(good.headers["webhook-timestamp"])
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    headers = {**good.headers,
               "webhook-signature": sign(key, good.headers["webhook-id"], stamp, body)}
    assert post(url, headers, body) == 400
    assert inbox(receiver_db) == []


def test_ce_headers_added_to_a_signed_request_never_reach_the_handler(
        example: Example, receiver_db: str) -> None:
    """The reported forgery: ce-type and ce-subject added to a captured request: 400, no work.

    Then the request as captured is done once: the forgery recorded nothing.
    """
    url, table = example.url(), example.table
    captured = signed_request(SECRET, "mail.received", {"message_id": 8}, key="customer-8")
    forged = {**captured.headers, "ce-specversion": "1.0", "ce-type": "mail.deleted",
              "ce-subject": "attacker", "ce-id": captured.headers["webhook-id"],
              "ce-source": "/outbox-dispatcher", "ce-time": "2024-05-01T12:00:00Z"}
    assert post(url, forged, captured.body) == 400
    assert post(url, {**captured.headers, "ce-type": "mail.deleted"}, captured.body) == 400
    assert effects(receiver_db, table) == []
    assert inbox(receiver_db) == []
    assert post(url, captured.headers, captured.body) == 204
    assert effects(receiver_db, table) == [(8, captured.events[0].id)]
    cloudevents = example.url("cloudevents")  # and a CloudEvents receiver refuses the original
    assert post(cloudevents, captured.headers, captured.body) == 400


def post_stream(url: str, headers: dict[str, str], chunks: Iterator[bytes]) -> int:
    """POST with chunked transfer encoding (no Content-Length); the status, or 0 if cut off.

    A server that refuses a body early may close the connection before the
    client has written all of it: the answer is then lost to the client.
    """
    try:
        return httpx.post(url, content=chunks, headers=headers, timeout=10).status_code
    except httpx.TransportError:
        return 0


def test_a_body_larger_than_max_body_is_413_and_read_no_further(
        example: Example, receiver_db: str) -> None:
    """Above 5 MiB, with or without Content-Length: 413, nothing recorded; 5 MiB is read."""
    url, table = example.url(), example.table
    request = signed_request(SECRET, "mail.received", {"message_id": 9})
    limit = 5 * 1024 * 1024
    padded = request.body + b" " * (limit + 1 - len(request.body))  # JSON allows the spaces
    assert post(url, request.headers, padded) == 413
    chunks = (padded[i:i + 65536] for i in range(0, len(padded), 65536))
    assert post_stream(url, request.headers, chunks) in {413, 0}
    assert effects(receiver_db, table) == []
    assert post(url, request.headers, padded[:limit]) == 401  # read, then the signature fails
    assert inbox(receiver_db) == []


def test_a_failure_is_5xx_and_rolls_back_so_the_retry_does_the_work(
        app: tuple[str, str, str], receiver_db: str) -> None:
    """The work fails: 5xx, no record kept; once fixed, the same delivery is done, once."""
    url, table, consumer = app
    request = signed_request(SECRET, "mail.received", {"message_id": 5})
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
        example: Example, receiver_db: str, dsn: str, fleet: Fleet,
        fmt: str, max_batch: int) -> None:
    """The dispatcher's own requests, single or batched, either format: each event once."""
    url, table, consumer = example.url(fmt), example.table, example.consumer
    add_endpoint(dsn, url, secret=OLD, format=fmt, max_batch=max_batch)
    with psycopg.connect(dsn) as conn:
        ids = [str(i) for i in outbox.publish_many(conn, [
            outbox.Event("mail.received", {"message_id": n}, key="caf\u00e9 %" if n % 2 else None)
            for n in range(1, 8)])]
        conn.commit()
    fleet.start()
    wait_until(lambda: all_delivered(dsn, 7), 30, "every event delivered")
    assert effects(receiver_db, table) == [(n, i) for n, i in enumerate(ids, 1)]
    assert sorted(inbox(receiver_db)) == sorted((consumer, i) for i in ids)
