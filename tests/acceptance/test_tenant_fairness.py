"""Fair turns between tenants as the real dispatcher keeps them, at CI size: an endpoint
with --max-in-flight 16 answering in 10 ms, tenant A with a backlog, tenant B publishing an
event every 100 ms. In publish order each of B's events would wait behind what is left of
A's backlog (thousands of requests); in turns it waits behind a few dozen of A's at most,
for one dispatcher and for two. The bound is an order of magnitude from the failure, like a
liveness deadline: the figures themselves are measured by benchmarks/tenants.py."""

from __future__ import annotations

import json
import statistics
import time
from contextlib import ExitStack

import psycopg
import pytest

import outbox
from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import Dispatcher, add_endpoint, wait_until

BACKLOG = 5000
QUIET = 15
AHEAD = 300
"""A's requests that may arrive between one of B's commits and its arrival, at most: in
turns, about the requests in flight and prefetched (16 + 16, a few claims' worth); in
publish order, what is left of A's backlog."""


def _slow(_: Request) -> Response:
    return Response(delay=0.01)


@pytest.mark.parametrize("dispatchers", [1, 2])
def test_a_quiet_tenant_is_not_kept_behind_a_noisy_ones_backlog(dsn: str,
                                                                 dispatchers: int) -> None:
    with Receiver(_slow) as receiver, psycopg.connect(dsn) as conn, ExitStack() as stack:
        add_endpoint(conn, "shared", receiver.url, max_in_flight=16)
        outbox.publish_many(conn, [outbox.Event("bulk", {"n": n}, tenant="a")
                                   for n in range(BACKLOG)])
        conn.commit()
        running = [stack.enter_context(Dispatcher(dsn)) for _ in range(dispatchers)]
        wait_until(lambda: receiver.count >= 200, timeout=60, what="A's backlog to flow",
                   dispatcher=running[0])
        committed: dict[int, float] = {}
        for n in range(QUIET):
            outbox.publish(conn, "quiet", {"n": n}, tenant="b")
            conn.commit()
            committed[n] = time.time()
            time.sleep(0.1)
        wait_until(lambda: sum(1 for r in list(receiver.requests)
                               if json.loads(r.body)["tenant"] == "b") >= QUIET,
                   timeout=60, what="B's events", dispatcher=running[0])
        arrivals = [(r.received_at, json.loads(r.body)) for r in list(receiver.requests)]
    a_times = sorted(at for at, body in arrivals if body["tenant"] == "a")
    waits, ahead = [], []
    for at, body in arrivals:
        if body["tenant"] != "b":
            continue
        began = committed[body["data"]["n"]]
        waits.append(at - began)
        ahead.append(sum(1 for a_at in a_times if began < a_at < at))
    assert max(ahead) <= AHEAD, (ahead, waits)
    assert statistics.median(waits) < 1.0, waits
    # B's events all went while A still had a backlog: the test measured turns, not a
    # queue that had run dry.
    assert len(a_times) < BACKLOG
