"""Fault catalogue: the receiving side: hostile and poisoned endpoints, events at their limits.

Receivers here are real servers on 127.0.0.1 that misbehave on purpose
(``tests.support.hostile``): they hang, drip, flood, reset and echo. Each
misbehaviour must end as a recorded, retried attempt that costs no other
endpoint anything, and the event must still arrive, with the same
``webhook-id``, once the receiver behaves.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any
from urllib.parse import unquote

import psycopg
import pytest
from standardwebhooks.webhooks import Webhook

import outbox
from outbox.testing import Receiver, Request
from tests.support import dispatcher as single
from tests.support.hostile import Act, HostileReceiver
from tests.support.proxy import FaultProxy
from tests.support.resilience import (
    DispatcherProcess,
    Fleet,
    add_endpoint,
    all_delivered,
    delivery_row,
    publish,
    wait_until,
)

pytestmark = pytest.mark.slow


def _failures(dispatcher: DispatcherProcess) -> dict[tuple[str, str], float]:
    """outbox_delivery_failures_total by (endpoint, reason), non-zero samples only."""
    _, body = dispatcher.get("/metrics")
    found = re.findall(r'^outbox_delivery_failures_total\{endpoint="([^"]+)",reason="([^"]+)"\} '
                       r"(\S+)$", body, re.MULTILINE)
    return {(ep, reason): float(v) for ep, reason, v in found if float(v)}


# Each endpoint's receiver misbehaves on the first try, then answers 200.
HOSTILE = {
    "hang": (Act.hang(), "timeout"),
    "drip": (Act.drip(0.1), "timeout"),
    "huge": (Act.huge(), "http_5xx"),
    "reset": (Act.reset_mid_answer(), "connect"),
    "echo": (Act.echo(500), "http_5xx"),
    "busy": (Act.answer(429, headers={"retry-after": "0"}), "http_4xx"),
}


def test_hostile_receivers_cost_one_attempt_each(dsn: str, fleet: Fleet) -> None:
    """Hangs, drips, 16 MiB bodies, resets mid-answer, echoes, 429s: each one retried attempt."""
    def script(request: Request, attempt: int) -> Act:
        return HOSTILE[request.path.strip("/")][0] if attempt == 1 else Act.answer(200)

    with HostileReceiver(script) as receiver:
        for name in HOSTILE:
            add_endpoint(dsn, receiver.url + name, name=name, events=[f"{name}.*"],
                         events_like=[f"{name}.%"], timeout_seconds=1.0)
        events = {name: publish(dsn, 2, type_=f"{name}.x") for name in HOSTILE}
        dispatcher = fleet.start()
        wait_until(lambda: all_delivered(dsn, 2 * len(HOSTILE)), 30, "every event delivered")
        tries = dict(receiver.tries)
    for ids in events.values():
        for event_id in ids:
            assert tries[event_id] == 2, (event_id, tries[event_id])
            row = delivery_row(dsn, event_id)
            assert (row["attempts"], row["last_status"], row["last_error"]) == (2, 200, None)
    expected = {(name, reason): 2.0 for name, (_, reason) in HOSTILE.items()}
    wait_until(lambda: _failures(dispatcher) == expected, 10,
               f"failure counts {expected}, got {_failures(dispatcher)}")
    assert dispatcher.alive()


def test_an_answer_cut_by_the_network_is_retried(dsn: str, receiver: Receiver,
                                                fleet: Fleet) -> None:
    """The network cuts the answer after 10 bytes: one failed attempt, then delivered."""
    with FaultProxy(receiver.port) as proxy:
        proxy.close_after = 10
        add_endpoint(dsn, proxy.url(), min_backoff_seconds=2.0, max_backoff_seconds=2.0)
        [event_id] = publish(dsn, 1)
        fleet.start()
        wait_until(lambda: receiver.count == 1, 20, "the first attempt")
        wait_until(lambda: delivery_row(dsn, event_id)["attempts"] == 1
                   and delivery_row(dsn, event_id)["state"] == "pending", 20,
                   "the cut answer recorded as a failed attempt")
        proxy.heal()
        wait_until(lambda: all_delivered(dsn, 1), 20, "the retry")
    row = delivery_row(dsn, event_id)
    assert (row["attempts"], row["last_status"]) == (2, 200)
    assert [r.header("webhook-id") for r in receiver.snapshot()] == [event_id, event_id]


def test_a_poison_endpoint_never_delays_healthy_ones(dsn: str, receiver: Receiver,
                                                     fleet: Fleet) -> None:
    """An endpoint whose requests all hang holds its own slots only: others flow meanwhile."""
    with HostileReceiver(lambda _r, _a: Act.hang()) as poison:
        add_endpoint(dsn, poison.url, name="poison", events=["poison.*"],
                     events_like=["poison.%"], max_in_flight=4, timeout_seconds=60.0)
        add_endpoint(dsn, receiver.url, name="healthy", events=["healthy.*"],
                     events_like=["healthy.%"])
        stuck = publish(dsn, 200, type_="poison.x")
        fleet.start("--concurrency", "8")
        wait_until(lambda: poison.pending() == 4, 20, "the poison's requests to hang")
        healthy = publish(dsn, 50, type_="healthy.x")
        wait_until(lambda: receiver.count == 50, 20, "the healthy endpoint's events")
        # Nothing of the poison ended meanwhile: no deadline was waited out.
        assert (poison.pending(), len(poison.snapshot())) == (4, 4)
        poison.release()
        wait_until(lambda: all_delivered(dsn, 250), 60, "every event once the poison heals")
        assert sorted(poison.tries) == sorted(stuck)
    assert sorted(r.header("webhook-id") for r in receiver.snapshot()) == sorted(healthy)


def _type_of_255() -> str:
    return "a" * 120 + "." + "b" * 134


def _payload_of(size: int) -> tuple[dict[str, Any], bytes]:
    """A payload whose compact JSON is exactly ``size`` bytes, multi-byte characters included."""
    text = "é" * 1000 + "x" * (size - 2000 - len('{"blob":""}'))
    payload = {"blob": text}
    serialised = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    assert len(serialised) == size
    return payload, serialised


@pytest.mark.parametrize("fmt", ["standard-webhooks", "cloudevents"])
def test_events_at_their_limits_arrive_intact(conn: psycopg.Connection[Any], dsn: str,
                                              receiver: Receiver, fmt: str) -> None:
    """1 MiB payload, 255-character type and key, 8 KiB header values: delivered intact."""
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    endpoint_header = "e" * 8192
    event_header = "".join(chr(0x20 + n % 95) for n in range(8192))  # every printable one
    key = ("ключ/ä %" * 40)[:255]
    payload, serialised = _payload_of(outbox.MAX_PAYLOAD_BYTES)
    single.add_endpoint(conn, "limits", receiver.url, secret=secret, format=fmt,
                        headers={"x-endpoint-big": endpoint_header})
    event_id = single.publish(conn, _type_of_255(), payload, key=key,
                              headers={"x-event-big": event_header})
    code, log = single.run_once(dsn)
    assert code == 0, log
    [request] = receiver.snapshot()
    assert request.header("x-endpoint-big") == endpoint_header
    assert request.header("x-event-big") == event_header.strip()  # as any receiver reads it
    Webhook(secret).verify(request.body, request.headers)
    if fmt == "cloudevents":
        assert request.body == serialised
        assert request.header("ce-type") == _type_of_255()
        assert unquote(request.header("ce-subject") or "") == key
    else:
        body = json.loads(request.body)
        assert (body["id"], body["type"], body["key"]) == (str(event_id), _type_of_255(), key)
        assert b'"data":' + serialised + b"}" in request.body
        assert body["data"] == payload
