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
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from dispatcher.policy.outcome import MAX_ERROR_LENGTH
from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    publish,
    wait_for_state,
    wait_until,
)
from tests.support.faults import terminate

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
BASIC = "Basic " + base64.b64encode(b"hooks:" + os.urandom(12).hex().encode()).decode()
API_KEY = "ak_" + os.urandom(16).hex()
DSN_PASSWORD = "pw-" + os.urandom(12).hex()  # the test cluster trusts: any password works
TENANT = "tenant-" + os.urandom(8).hex()


def as_http(request: Request) -> bytes:
    """The request as it came, one header per line."""
    head = [f"{request.method} {request.path} HTTP/1.1"]
    head += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + request.body


def as_json(request: Request) -> bytes:
    """The request as a JSON document, '/' escaped as PHP's json_encode does."""
    document = {"headers": request.headers, "body": request.body.decode()}
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
        with_password = psycopg.conninfo.make_conninfo(dsn, password=DSN_PASSWORD)
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
    assert last_error.startswith("HTTP 500: ")
    assert "[redacted]" in last_error
    assert "dead-lettered" in log
    for secret in secrets_of(requests):
        assert secret not in last_error, secret
    for secret in [*secrets_of(requests), DSN_PASSWORD, TENANT]:
        assert secret not in log, secret
        assert secret not in metrics, secret
    # Payloads only at DEBUG (seen there, so the check above ran on a debug log), and
    # never in last_error, whatever the echo repeats.
    assert ('"order":7' in log or '\\"order\\":7' in log) == (level == "DEBUG")
    assert '"order":7' not in last_error
