"""Fault catalogue: the dispatcher's clock an hour off, ahead and behind.

The dispatcher runs under libfaketime (``tests.support.faults.skewed_clock``):
every wall-clock read of the process is shifted, PostgreSQL's is not. What
must not change is every decision that compares times: when a retry is due,
when a lease has run out (another dispatcher's, alive or dead), when a
rotated secret's overlap ends, and the age of an event when it is delivered.
What does change, and is checked so that the test cannot pass without the
shift: ``webhook-timestamp``, which is this attempt's time on the
dispatcher's clock (receivers compare it with their own).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections import Counter

import psycopg
import pytest

from outbox.testing import Receiver, Request, Response
from tests.support.faults import skewed_clock
from tests.support.resilience import Fleet, add_endpoint, delivery_row, publish, wait_until

pytestmark = pytest.mark.slow


def _secret() -> tuple[str, bytes]:
    key = os.urandom(32)
    return "whsec_" + base64.b64encode(key).decode(), key


def _signed_by(request: Request, key: bytes) -> bool:
    content = (f"{request.header('webhook-id')}.{request.header('webhook-timestamp')}."
               .encode() + request.body)
    expected = "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return expected in (request.header("webhook-signature") or "").split()


def _endpoint(dsn: str, receiver: Receiver, name: str, **columns: object) -> None:
    add_endpoint(dsn, receiver.url + name, name=name, events=[f"{name}.*"],
                 events_like=[f"{name}.%"], timeout_seconds=1.0, **columns)


def _previous_secret(dsn: str, name: str, secret: str, expires_in: str) -> None:
    """A rotated secret whose overlap ends ``expires_in`` from now on the database clock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE outbox.endpoints SET previous_secrets = jsonb_build_array("
                     "jsonb_build_object('secret', %s::text, 'expires_at', "
                     "now() + %s::interval)) WHERE name = %s", (secret, expires_in, name))


def _lease(dsn: str, event_id: str, expires_in: str) -> None:
    """The event's delivery held by some dispatcher, its lease ending ``expires_in`` from now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE outbox.deliveries SET state = 'in_flight', attempts = 1, "
                     "lease_token = gen_random_uuid(), lease_expires_at = now() + %s::interval "
                     "WHERE event_id = %s::uuid", (expires_in, event_id))


@pytest.mark.parametrize("offset", ["+1h", "-1h"])
def test_dispatcher_clock_an_hour_off(dsn: str, receiver: Receiver, fleet: Fleet,
                                      offset: str) -> None:
    """Retries, leases, secret overlaps and delivery lag follow the database clock, not ours."""
    tries = Counter[str]()

    def respond(request: Request) -> Response:
        tries[request.header("webhook-id") or ""] += 1
        first = tries[request.header("webhook-id") or ""] == 1
        return Response(503 if request.path == "/flaky" and first else 200)

    receiver.responder = respond
    current, current_key = _secret()
    old, old_key = _secret()
    _endpoint(dsn, receiver, "overlap", secret=current)
    _previous_secret(dsn, "overlap", old, "30 minutes")  # still signing
    _endpoint(dsn, receiver, "ended", secret=current)
    _previous_secret(dsn, "ended", old, "-30 minutes")  # no longer signing
    _endpoint(dsn, receiver, "flaky", min_backoff_seconds=0.05, max_backoff_seconds=0.1)
    _endpoint(dsn, receiver, "lease")
    [overlap] = publish(dsn, 1, type_="overlap.x")
    [ended] = publish(dsn, 1, type_="ended.x")
    [flaky] = publish(dsn, 1, type_="flaky.x")
    alive, expired = publish(dsn, 2, type_="lease.x")
    _lease(dsn, alive, "30 minutes")  # another dispatcher's, still valid
    _lease(dsn, expired, "-1 second")  # a dead dispatcher's

    dispatcher = fleet.start(env=skewed_clock(offset))
    for event_id in (overlap, ended, flaky, expired):
        wait_until(lambda e=event_id: delivery_row(dsn, e)["state"] == "delivered", 20,
                   f"delivery of {event_id}")
    assert delivery_row(dsn, alive)["state"] == "in_flight", "a live lease was rescued"
    assert delivery_row(dsn, flaky)["attempts"] == 2  # retried after its backoff

    by_id = {r.header("webhook-id"): r for r in receiver.snapshot()}
    shift = 3600 if offset == "+1h" else -3600
    stamp = int(by_id[overlap].header("webhook-timestamp") or 0)
    assert abs(stamp - time.time() - shift) < 300, "the dispatcher's clock was not shifted"
    assert _signed_by(by_id[overlap], current_key)
    assert _signed_by(by_id[overlap], old_key), "the overlap ended early by our clock"
    assert _signed_by(by_id[ended], current_key)
    assert not _signed_by(by_id[ended], old_key), "an ended overlap still signed by our clock"
    lags = dispatcher.metric("outbox_delivery_lag_seconds_sum")
    assert dispatcher.metric("outbox_delivery_lag_seconds_count") == 4
    assert 0 < lags < 4 * 60, f"lag of 4 deliveries: {lags} s in all"
