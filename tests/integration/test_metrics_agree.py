"""The metrics a running dispatcher serves agree with what the receiver saw.

Operators alert on these counters, so they are checked against an
independent tally: the receiver's responder scripts every answer (success,
5xx, 4xx, a hang past the timeout) and counts what it produced; the
dispatcher's ``/metrics`` must report the same numbers under the documented
names, types and labels.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

import outbox
from outbox.testing import Receiver, Request, Response
from tests.support.contract import METRICS
from tests.support.dispatcher import Dispatcher, add_endpoint, wait_all_finished

CONTRACT = METRICS
# How many events of each plan, and what the receiver does with them.
PLANS = {"ok": 5, "flaky": 3, "bad": 2, "slow": 2, "down": 1}


class Tally:
    """Answers each request by its event's plan, counting the answers the dispatcher got."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()  # arrivals per event id
        self.ok = 0
        self.failures: Counter[str] = Counter()

    def respond(self, request: Request) -> Response:
        body = json.loads(request.body)
        plan, event_id = body["data"]["plan"], body["id"]
        self.seen[event_id] += 1
        first = self.seen[event_id] == 1
        if plan == "bad":
            return self._fail("http_4xx", Response(422))
        if plan == "down" or (plan == "flaky" and first):
            return self._fail("http_5xx", Response(503))
        if plan == "slow" and first:  # answered long after the 0.5 s timeout
            self.failures["timeout"] += 1
            return Response(200, delay=5)
        self.ok += 1
        return Response(200)

    def _fail(self, reason: str, response: Response) -> Response:
        self.failures[reason] += 1
        return response


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def value(text: str, name: str, **labels: str) -> float:
    found = [v for got, v in samples(text, name) if got == labels]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def test_metrics_match_what_the_receiver_answered(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """/metrics has every documented metric with its type and labels, and counts what happened."""
    tally = Tally()
    receiver.responder = tally.respond
    add_endpoint(conn, "metered", receiver.url, timeout_seconds=0.5, max_attempts=3)
    add_endpoint(conn, "idle", receiver.url + "idle", events=("never.*",))
    for plan, count in PLANS.items():
        for n in range(count):
            outbox.publish(conn, "order.created", {"plan": plan, "n": n})
    conn.commit()
    with Dispatcher(dsn) as dispatcher:
        dispatcher.wait_serving()
        finished = wait_all_finished(conn, sum(PLANS.values()), dispatcher=dispatcher)
        assert dispatcher.get("/healthz").status_code == 200
        assert dispatcher.get("/readyz").status_code == 200
        scrape = dispatcher.get("/metrics")
        assert dispatcher.stop() == 0
    assert scrape.status_code == 200
    text = scrape.text

    for name, (kind, labels) in CONTRACT.items():
        assert f"# TYPE {name} {kind}" in text, name
        series = samples(text, name + ("_count" if kind == "histogram" else ""))
        assert series, f"no samples of {name}"
        assert all(set(got) == labels for got, _ in series), (name, series)
    buckets = samples(text, "outbox_delivery_duration_seconds_bucket")
    assert all(set(got) == {"endpoint", "le"} for got, _ in buckets)

    dead = PLANS["bad"] + PLANS["down"]
    assert finished == {"delivered": sum(PLANS.values()) - dead, "dead": dead}
    assert value(text, "outbox_delivered_total", endpoint="metered") == tally.ok
    assert value(text, "outbox_dead_letters_total", endpoint="metered") == dead
    for reason in ("timeout", "connect", "http_4xx", "http_5xx", "other"):
        assert value(text, "outbox_delivery_failures_total", endpoint="metered",
                     reason=reason) == tally.failures[reason], reason
    assert tally.failures == {"http_5xx": PLANS["flaky"] + 3 * PLANS["down"],
                              "http_4xx": PLANS["bad"], "timeout": PLANS["slow"]}
    attempts = tally.ok + sum(tally.failures.values())
    assert value(text, "outbox_delivery_duration_seconds_count", endpoint="metered") == attempts
    assert value(text, "outbox_delivery_lag_seconds_count", endpoint="metered") == tally.ok
    assert value(text, "outbox_pending", endpoint="metered") == 0
    assert value(text, "outbox_delivered_total", endpoint="idle") == 0


def test_fleet_histograms_count_every_endpoints_deliveries_in_one(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """OUTBOX_HISTOGRAMS=fleet: the two histograms come once, without endpoint, counting the
    deliveries of both endpoints; the counters stay per endpoint."""
    add_endpoint(conn, "first", receiver.url, events=("a.*",))
    add_endpoint(conn, "second", receiver.url + "second", events=("b.*",))
    for event_type in ("a.one", "a.two", "b.one"):
        outbox.publish(conn, event_type, {})
    conn.commit()
    with Dispatcher(dsn, env={"OUTBOX_HISTOGRAMS": "fleet"}) as dispatcher:
        dispatcher.wait_serving()
        wait_all_finished(conn, 3, dispatcher=dispatcher)
        text = dispatcher.get("/metrics").text
    for name in ("outbox_delivery_duration_seconds", "outbox_delivery_lag_seconds"):
        assert value(text, f"{name}_count") == 3
        for suffix in ("_bucket", "_count", "_sum"):
            assert all("endpoint" not in got for got, _ in samples(text, name + suffix))
    assert value(text, "outbox_delivered_total", endpoint="first") == 2
    assert value(text, "outbox_delivered_total", endpoint="second") == 1
