"""Claim sizing: slots, batches, rate limits and fairness, without a database."""

from __future__ import annotations

import time

from dispatcher.policy.model import Endpoint
from dispatcher.policy.quota import PREFETCH, Quotas


def _ep(ep_id: int, **kw: object) -> Endpoint:
    return Endpoint(id=ep_id, name=f"e{ep_id}", url="http://127.0.0.1/", **kw)  # type: ignore[arg-type]


def test_free_slots_of_each_endpoint_bound_its_rows() -> None:
    """An endpoint asks for its free slots (prefetch included), times its batch size."""
    endpoints = [_ep(1, max_in_flight=4), _ep(2, max_in_flight=2, max_batch=10)]
    plan = Quotas(time.monotonic).plan(endpoints, in_flight={1: 3}, free=100, batch_size=1000)
    assert plan.wanted() == {1: 4 * PREFETCH - 3, 2: 2 * PREFETCH * 10}


def test_rate_limited_endpoints_do_not_prefetch() -> None:
    """A rate-limited endpoint asks for no more than its own in-flight slots."""
    plan = Quotas(time.monotonic).plan([_ep(1, max_in_flight=2, rate_limit=1000.0)],
                                       in_flight={}, free=100, batch_size=1000)
    assert plan.wanted() == {1: 2}


def test_global_concurrency_and_batch_size_cap_the_plan() -> None:
    """The global request slots and the claim's batch size are never exceeded."""
    endpoints = [_ep(i, max_in_flight=16) for i in range(1, 5)]
    plan = Quotas(time.monotonic).plan(endpoints, in_flight={}, free=20, batch_size=1000)
    assert sum(plan.limits) == 20
    plan = Quotas(time.monotonic).plan(endpoints, in_flight={}, free=100, batch_size=10)
    assert sum(plan.limits) == 10


def test_endpoint_order_rotates_between_claims() -> None:
    """Under a full load no endpoint always comes first."""
    quotas = Quotas(time.monotonic)
    endpoints = [_ep(i, max_in_flight=1) for i in range(1, 4)]
    firsts = {quotas.plan(endpoints, in_flight={}, free=1, batch_size=10).endpoint_ids[0]
              for _ in range(3)}
    assert firsts == {1, 2, 3}


def test_rate_limited_endpoint_waits_for_its_token() -> None:
    """A rate-limited endpoint that used its token is left out, with a wake-up time."""
    quotas = Quotas(time.monotonic)
    ep = _ep(1, max_in_flight=10, rate_limit=1.0)
    plan = quotas.plan([ep], in_flight={}, free=10, batch_size=10)
    assert plan.wanted() == {1: 1}
    bucket = quotas.bucket(ep)
    assert bucket is not None
    bucket.take()
    assert quotas.claimed(plan, {1: 1}) is True
    plan = quotas.plan([ep], in_flight={}, free=10, batch_size=10)
    assert plan.endpoint_ids == []
    assert quotas.throttled is not None
    assert quotas.throttled > 0


def test_claimed_reports_whether_more_may_be_due() -> None:
    """A claim that got fewer rows than asked means the endpoint is drained."""
    quotas = Quotas(time.monotonic)
    plan = quotas.plan([_ep(1)], in_flight={}, free=16, batch_size=100)
    assert quotas.claimed(plan, {1: 3}) is False
    assert quotas.claimed(plan, {1: 16}) is True
