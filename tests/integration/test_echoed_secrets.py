"""A receiver that echoes our request back cannot put our secrets in last_error or the log.

The real dispatcher posts to a real receiver on 127.0.0.1 that answers every
request with a 500 whose body is the whole request, headers and body, as a
debugging endpoint or a proxy's error page would. After the delivery is
dead, neither its ``last_error`` nor the dispatcher's log (at INFO, where
payloads are not logged) holds the endpoint's secret, a signature, the
``Authorization`` value or another custom header's value. The log, at INFO
and at DEBUG (where only payloads may appear), and the metrics page hold none
of them either, nor the DSN's password, nor an event header's value, even
after the dispatcher's database connections were killed and it logged why.

A receiver that quotes the one field it refused (a framework's validation
error) repeats a value from anywhere in the payload, and one behind a
Slack-style hook URL repeats the token in its path: both are masked too.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

from dispatcher.policy.outcome import MAX_ERROR_LENGTH
from outbox.testing import Receiver, Request, Response
from tests.support.cli import run_outbox
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    publish,
    run_once,
    wait_for_state,
    wait_until,
)
from tests.support.faults import terminate

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
BASIC = "Basic " + base64.b64encode(b"hooks:" + os.urandom(12).hex().encode()).decode()
API_KEY = "ak_" + os.urandom(16).hex()
DSN_PASSWORD = "pw-" + os.urandom(12).hex()  # for a cluster that trusts: any password works
TENANT = "tenant-" + os.urandom(8).hex()


def as_http(request: Request) -> bytes:
    """The request as it came, one header per line."""
    head = [f"{request.method} {request.path} HTTP/1.1"]
    head += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + request.body


CREDENTIALS = ("authorization", "x-api-key", "webhook-signature")


def as_json(request: Request) -> bytes:
    """The request as a JSON document, '/' escaped as PHP's json_encode does; the headers
    that carry credentials first, so that the length of the others (a version in the
    User-Agent) cannot move them past where last_error is cut."""
    headers = {name: request.headers[name] for name in CREDENTIALS if name in request.headers}
    headers |= {name: value for name, value in request.headers.items() if name not in headers}
    document = {"headers": headers, "body": request.body.decode()}
    return json.dumps(document).replace("/", "\\/").encode()


def secrets_of(requests: list[Request]) -> list[str]:
    """Everything the requests carried that must not come back: keys, signatures, credentials."""
    found = [SECRET, SECRET[6:], BASIC, BASIC.split()[1], API_KEY]
    for request in requests:
        for signature in request.header("webhook-signature").split():
            found += [signature, signature[3:]]
    return found


@pytest.mark.parametrize(("echo", "level", "fmt"), [(as_http, "INFO", "text"),
                                                     (as_json, "DEBUG", "json")],
                         ids=["http-info-text", "json-debug-json"])
def test_echoing_receiver_leaks_nothing(conn: psycopg.Connection[Any], dsn: str,
                                        echo: Callable[[Request], bytes], level: str,
                                        fmt: str) -> None:
    """After retries end in a dead letter, last_error, the log and /metrics hold no secret."""
    with Receiver(lambda request: Response(500, body=echo(request))) as receiver:
        add_endpoint(conn, "echo", receiver.url, secret=SECRET, max_attempts=2,
                     headers={"authorization": BASIC, "x-api-key": API_KEY})
        event_id = publish(conn, "order.created", {"order": 7}, headers={"x-tenant": TENANT})
        password = str(psycopg.conninfo.conninfo_to_dict(dsn).get("password") or DSN_PASSWORD)
        with_password = psycopg.conninfo.make_conninfo(dsn, password=password)
        with Dispatcher(with_password, "--log-level", level, "--log-format", fmt) as dispatcher:
            dead = wait_for_state(conn, event_id, "dead", dispatcher=dispatcher)
            terminate(dsn, "claim")  # an error path that logs what the driver said
            wait_until(lambda: "database is not usable" in dispatcher.log(), 10,
                       "the lost connection to be logged", dispatcher=dispatcher)
            metrics = dispatcher.get("/metrics").text
            dispatcher.stop()
            log = dispatcher.log()
        requests = receiver.snapshot()
    assert len(requests) == 2
    # The echo has every secret early, where the length cap cannot be what hides it.
    start = echo(requests[0]).decode()[:MAX_ERROR_LENGTH - 50]
    for secret in (requests[0].header("webhook-signature"), BASIC, API_KEY):
        assert (secret.replace("/", "\\/") if echo is as_json else secret) in start
    last_error = dead["last_error"]
    assert last_error.startswith("HTTP 500 Internal Server Error: ")
    assert "[redacted]" in last_error
    assert "dead-lettered" in log
    for secret in secrets_of(requests):
        assert secret not in last_error, secret
    for secret in [*secrets_of(requests), password, TENANT]:
        assert secret not in log, secret
        assert secret not in metrics, secret
    # Payloads only at DEBUG (seen there, so the check above ran on a debug log), and
    # never in last_error, whatever the echo repeats.
    assert ('"order":7' in log or '\\"order\\":7' in log) == (level == "DEBUG")
    assert '"order":7' not in last_error


CARD = "4111111111111111"
HOLDER = "Alice Example"
QUERY_TOKEN = "qt-" + os.urandom(8).hex()


def reparsed(spelling: str) -> Callable[[Request], bytes]:
    """A receiver that parsed our body and wrote it again, with the request line beside it."""
    def answer(request: Request) -> bytes:
        body = json.loads(request.body)
        line = f"{request.method} {request.path} HTTP/1.1"
        if spelling == "json.dumps":  # Python's default spacing
            return json.dumps({"request_line": line, "body": body}).encode()
        if spelling == "pretty":
            return json.dumps({"request_line": line, "body": body}, indent=2).encode()
        if spelling == "repr":
            return repr({"request_line": line, "body": body}).encode()
        return urlencode({"line": line, **body["data"]}).encode()  # form encoding
    return answer


@pytest.mark.parametrize("spelling", ["json.dumps", "pretty", "repr", "form"])
def test_payload_written_again_by_the_receiver_reaches_neither_last_error_nor_the_log(
        conn: psycopg.Connection[Any], dsn: str, spelling: str) -> None:
    """A 500 whose body is our payload re-serialised, and our request line with its query
    token: `outbox dead list --json` and the dead-letter WARNING line show neither."""
    with Receiver(lambda request: Response(500, body=reparsed(spelling)(request))) as receiver:
        add_endpoint(conn, "reparse", f"{receiver.url}in?token={QUERY_TOKEN}&v=2",
                     max_attempts=1)
        event_id = publish(conn, "card.saved", {"card": CARD, "name": HOLDER, "n": 1})
        with Dispatcher(dsn) as dispatcher:
            wait_for_state(conn, event_id, "dead", dispatcher=dispatcher)
            wait_until(lambda: "dead-lettered" in dispatcher.log(), 10,
                       "the dead letter to be logged", dispatcher=dispatcher)
            log = dispatcher.log()
        assert CARD in reparsed(spelling)(receiver.snapshot()[0]).decode()
    listed = run_outbox(dsn, "dead", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [dead] = json.loads(listed.stdout)
    warning = next(line for line in log.splitlines() if "dead-lettered" in line)
    for shown in (dead["last_error"], warning):
        assert "[redacted]" in shown
        for secret in (CARD, HOLDER, "Alice", QUERY_TOKEN):
            assert secret not in shown, (secret, shown)


SSNS = {240: "078-05-1120", 1_040: "219-09-9999", 3_040: "457-55-5462"}


def fastapi_422(request: Request) -> Response:
    """FastAPI's 422 for a field it refused: a short body quoting the field's value."""
    ssn = json.loads(request.body)["data"]["ssn"]
    detail = {"detail": [{"type": "string_pattern_mismatch", "loc": ["body", "ssn"],
                          "msg": "String should match pattern", "input": ssn}]}
    return Response(422, {"content-type": "application/json"},
                    json.dumps(detail, separators=(",", ":")).encode())


def test_a_field_quoted_by_a_validation_error_is_masked_wherever_it_sits(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """A 422 quoting one field from 240, 1,040 or 3,040 characters into the payload: the
    value is in none of last_error, the history, dead list, show --json, the WARNING line."""
    with Receiver(fastapi_422) as receiver:
        add_endpoint(conn, "validating", receiver.url)
        ids = {}
        for offset, ssn in SSNS.items():
            pad = "p" * (offset - len('{"pad":"","ssn":"'))  # publish() writes compact JSON
            ids[ssn] = publish(conn, "person.saved", {"pad": pad, "ssn": ssn})
            [[position]] = conn.execute("SELECT strpos(payload::text, %s) - 1 "
                                        "FROM outbox.events WHERE id = %s",
                                        (ssn, ids[ssn])).fetchall()
            assert position == offset
        code, log = run_once(dsn)
        answers = [fastapi_422(request).body.decode() for request in receiver.snapshot()]
    assert code == 1, log
    assert all(len(a) < min(SSNS) for a in answers)  # no answer is as long as an offset
    assert all(any(ssn in a for a in answers) for ssn in SSNS.values())
    listed = run_outbox(dsn, "dead", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3
    shown = [run_outbox(dsn, "show", "--json", str(event_id)) for event_id in ids.values()]
    assert all(s.returncode == 0 for s in shown), [s.stderr for s in shown]
    errors = [row[0] for row in conn.execute(
        "SELECT last_error FROM outbox.deliveries UNION ALL SELECT error FROM outbox.attempts")]
    assert len(errors) == 6
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert len(warnings) == 3
    for text in (*errors, listed.stdout, *(s.stdout for s in shown), *warnings):
        assert '"input":"[redacted]"' in text.replace('\\"', '"'), text
        for ssn in SSNS.values():
            assert ssn not in text, (ssn, text)


SLACK_TOKEN = "tk" + os.urandom(11).hex()  # 24 characters, as a Slack hook's token


def test_a_token_in_the_endpoint_path_is_masked_in_an_echo(conn: psycopg.Connection[Any],
                                                           dsn: str) -> None:
    """A Slack-style hook whose answer repeats the request line: its path token is masked."""
    def not_found(request: Request) -> Response:
        return Response(404, body=f"no hook at {request.method} {request.path}".encode())

    with Receiver(not_found) as receiver:
        add_endpoint(conn, "slack", f"{receiver.url}services/T0001/B0001/{SLACK_TOKEN}")
        event_id = publish(conn, "chat.posted", {"n": 1})
        code, log = run_once(dsn)
        [request] = receiver.snapshot()
    assert code == 1, log
    assert SLACK_TOKEN in request.path
    dead = wait_for_state(conn, event_id, "dead")
    assert dead["last_error"] == ("HTTP 404 Not Found: no hook at POST "
                                  "/services/T0001/B0001/[redacted]")
    assert SLACK_TOKEN not in log
