"""Claim sizing: slots, prefetch, batches and fairness, without a database."""

from __future__ import annotations

from dispatcher.limits.quota import Quotas, share
from dispatcher.policy.model import Endpoint


def _ep(ep_id: int, **kw: object) -> Endpoint:
    return Endpoint(id=ep_id, name=f"e{ep_id}", url="http://127.0.0.1/", **kw)  # type: ignore[arg-type]


def test_each_endpoint_asks_for_its_free_slots_and_one_round_of_prefetch() -> None:
    """Requests are the endpoint's slots not running here; prefetch one more round, in rows."""
    endpoints = [_ep(1, max_in_flight=4), _ep(2, max_in_flight=2, max_batch=10)]
    plan = Quotas().plan(endpoints, [], running={1: 3}, waiting={1: 1}, concurrency=100,
                         batch_size=1000)
    by_endpoint = dict(zip(plan.endpoint_ids, zip(plan.requests, plan.held, plan.prefetch,
                                                  plan.rows, strict=True), strict=True))
    # endpoint 1: one more slot; 3 running, 1 waiting -> 2 may still take a waiting group.
    assert by_endpoint[1] == (1, 2, 4, (1 + min(4, 2 + 1)) * 1)
    assert by_endpoint[2] == (2, 0, 2, (2 + 2) * 10)


def test_rate_limited_endpoints_do_not_prefetch() -> None:
    """A rate-limited endpoint asks for no more than its own in-flight slots."""
    plan = Quotas().plan([_ep(1, max_in_flight=2, rate_limit=1000.0)], [], running={}, waiting={},
                         concurrency=100, batch_size=1000)
    assert (plan.requests, plan.prefetch, plan.rows) == ([2], [0], [2])


def test_global_concurrency_and_batch_size_cap_the_plan() -> None:
    """The process's request slots and the claim's batch size are never exceeded."""
    endpoints = [_ep(i, max_in_flight=16) for i in range(1, 5)]
    plan = Quotas().plan(endpoints, [], running={}, waiting={}, concurrency=20, batch_size=1000)
    assert sum(plan.requests) == 20
    plan = Quotas().plan(endpoints, [], running={}, waiting={}, concurrency=100, batch_size=10)
    assert sum(plan.rows) == 10


def test_a_full_endpoint_still_prefetches_for_its_running_requests() -> None:
    """No free slot here, but running requests without a waiting group: prefetch for them."""
    plan = Quotas().plan([_ep(1, max_in_flight=2)], [], running={1: 2}, waiting={}, concurrency=10,
                         batch_size=100)
    assert (plan.requests, plan.held, plan.rows) == ([0], [2], [2])
    plan = Quotas().plan([_ep(1, max_in_flight=2)], [], running={1: 2}, waiting={1: 2},
                         concurrency=10, batch_size=100)
    assert plan.endpoint_ids == []


def test_free_slots_go_round_one_each_before_any_endpoint_gets_a_second() -> None:
    """A backlog never takes the slots another endpoint with due work would get."""
    due = [_ep(1), _ep(2), _ep(3)]
    plan = Quotas().plan(due, [], running={}, waiting={}, concurrency=2, batch_size=100)
    assert (plan.endpoint_ids, plan.requests) == ([1, 2], [1, 1])
    plan = Quotas().plan(due, [], running={}, waiting={}, concurrency=8, batch_size=100)
    assert plan.requests == [3, 3, 2]


def test_while_an_endpoint_waits_for_a_slot_no_one_keeps_theirs() -> None:
    """A busy endpoint takes no waiting group while others with due work got no slot."""
    hog, others = _ep(1, max_in_flight=64), [_ep(i) for i in range(2, 10)]
    plan = Quotas().plan(others, [hog], running={1: 4}, waiting={}, concurrency=4,
                         batch_size=100)
    assert plan.endpoint_ids == []  # no free slot, and no prefetch for the hog's four
    plan = Quotas().plan(others, [hog], running={1: 2}, waiting={}, concurrency=4,
                         batch_size=100)
    assert (plan.endpoint_ids, plan.requests, plan.rows) == ([2, 3], [1, 1], [2, 2])
    alone = Quotas().plan([hog], [], running={1: 4}, waiting={}, concurrency=4,
                          batch_size=100)
    assert (alone.held, alone.rows) == ([4], [4])  # alone, it keeps its slots busy


def test_share_deals_slots_in_turns_within_each_cap() -> None:
    """share(): one each in order, then a second each; caps and the total hold."""
    assert share(5, [16, 16]) == [3, 2]
    assert share(10, [1, 16, 0]) == [1, 9, 0]
    assert share(2, [1, 1, 1]) == [1, 1, 0]
    assert share(0, [3]) == [0]


def test_claimed_reports_whether_more_may_be_due() -> None:
    """A claim that got fewer rows than asked means the endpoint is drained."""
    quotas = Quotas()
    plan = quotas.plan([_ep(1)], [], running={}, waiting={}, concurrency=16, batch_size=100)
    assert quotas.claimed(plan, {1: 3}) is False
    assert quotas.claimed(plan, {1: plan.rows[0]}) is True


def test_an_endpoint_with_spare_slots_asks_for_groups_to_fill_them_not_for_new_slots() -> None:
    """Slots kept from requests that ended are filled first: no new slot is leased (each
    lease and give-back writes the slot's row) until a claim has filled them."""
    ep = _ep(1, max_in_flight=64)
    plan = Quotas().plan([ep], [], running={1: 3}, waiting={}, concurrency=64,
                         batch_size=100, spare={1: 3})
    assert (plan.requests, plan.held, plan.rows) == ([0], [3], [3])
    plan = Quotas().plan([ep], [], running={1: 3}, waiting={}, concurrency=64,
                         batch_size=100)
    assert plan.requests == [61]
