"""A receiver that echoes our request back cannot put our secrets in last_error or the log.

The real dispatcher posts to a real receiver on 127.0.0.1 that answers every
request with a 500 whose body is the whole request, headers and body, as a
debugging endpoint or a proxy's error page would. After the delivery is
dead, neither its ``last_error`` nor the dispatcher's log (at INFO, where
payloads are not logged) holds the endpoint's secret, a signature, the
``Authorization`` value or another custom header's value.
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
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, wait_for_state

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
BASIC = "Basic " + base64.b64encode(b"hooks:" + os.urandom(12).hex().encode()).decode()
API_KEY = "ak_" + os.urandom(16).hex()


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


@pytest.mark.parametrize("echo", [as_http, as_json], ids=["http", "json"])
def test_echoing_receiver_leaks_nothing(conn: psycopg.Connection[Any], dsn: str,
                                        echo: Callable[[Request], bytes]) -> None:
    """After retries end in a dead letter, last_error and the log hold no secret."""
    with Receiver(lambda request: Response(500, body=echo(request))) as receiver:
        add_endpoint(conn, "echo", receiver.url, secret=SECRET, max_attempts=2,
                     headers={"authorization": BASIC, "x-api-key": API_KEY})
        event_id = publish(conn, "order.created", {"order": 7}, headers={"x-tenant": "acme"})
        with Dispatcher(dsn, "--log-level", "INFO") as dispatcher:
            dead = wait_for_state(conn, event_id, "dead", dispatcher=dispatcher)
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
        assert secret not in log, secret
