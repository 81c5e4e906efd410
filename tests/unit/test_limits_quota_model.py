"""The claim bookkeeping as a state machine: no endpoint with due work waits beside a free slot.

A model of one dispatcher among many endpoints: events arrive, claims are
sized by the real :class:`~dispatcher.limits.quota.Quotas` (the turns moved
on by :class:`~dispatcher.limits.walk.Walk`) and granted as
the claim statement grants them (a slot per request asked while due rows
last, prefetched groups behind running requests), requests end in any
order and pass their slot to a waiting group of their endpoint as
:class:`~dispatcher.flights.Flights` does. Checked after every claim:

- ``--concurrency``, each ``--max-in-flight`` and ``--batch-size`` hold;
- waiting groups never outnumber the requests that will hand them a slot;
- the invariant of the many-endpoints fix: when a claim leaves a slot free
  (and was not cut short by ``--batch-size``, after which the claimer claims
  again at once), every endpoint with due work has a request running;
- and each endpoint with due work gets a request before ``TURNS`` requests
  of others have ended (the turns go round; nobody keeps a slot for ever).
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dispatcher.limits.quota import Quotas
from dispatcher.limits.walk import Walk
from dispatcher.policy.model import Endpoint

ENDPOINTS = 12
TURNS = 2 * ENDPOINTS + 6
"""Requests that may end while an endpoint with due work has none: each slot that comes
back goes to the next endpoint in turn, and a slot passes to a waiting group at most once."""


class ClaimBookkeeping(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.concurrency = 6
        self.batch_size = 20
        self.endpoints = {i: Endpoint(id=i, name=f"e{i}", url="http://127.0.0.1/",
                                      max_in_flight=1 + i % 4, max_batch=1 + i % 3)
                          for i in range(1, ENDPOINTS + 1)}
        self.quotas = Quotas()
        self.walker = Walk(self.endpoints.get, want=self.concurrency)
        self.due = dict.fromkeys(self.endpoints, 0)  # rows due, not claimed
        self.running: dict[int, int] = {}
        self.waiting: dict[int, int] = {}  # groups (each max_batch rows or fewer)
        self.passed_over = dict.fromkeys(self.endpoints, 0)  # requests ended meanwhile

    def walk(self) -> list[Endpoint]:
        """due_endpoints: ids after the cursor, round once, at most --concurrency of them."""
        ids = sorted(ep for ep, n in self.due.items() if n)
        ordered = [i for i in ids if i > self.walker.cursor] + [
            i for i in ids if i <= self.walker.cursor]
        return [self.endpoints[i] for i in ordered[:self.concurrency]]

    @rule(endpoint=st.integers(1, ENDPOINTS), rows=st.integers(1, 30))
    def publish(self, endpoint: int, rows: int) -> None:
        self.due[endpoint] += rows

    @rule()
    def claim(self) -> None:
        due = self.walk()
        seen = {ep.id for ep in due}
        busy = [self.endpoints[i] for i, n in self.running.items() if n and i not in seen]
        free_before = self.concurrency - sum(self.running.values())
        plan = self.quotas.plan(due, busy, running=dict(self.running),
                                waiting=dict(self.waiting), concurrency=self.concurrency,
                                batch_size=self.batch_size,
                                more_due=len(due) >= self.concurrency)
        self.walker.due = due
        self.walker.served(plan.endpoint_ids, plan.requests)
        assert sum(plan.rows) <= self.batch_size
        assert sum(plan.requests) <= max(0, free_before)
        for ep_id, asked, held, prefetch, rows in zip(
                plan.endpoint_ids, plan.requests, plan.held, plan.prefetch, plan.rows,
                strict=True):
            ep = self.endpoints[ep_id]
            groups = min(-(-self.due[ep_id] // ep.max_batch), rows // ep.max_batch or 1)
            granted = min(asked, groups)
            queued = min(groups - granted, prefetch, held + granted)
            taken = min(self.due[ep_id], (granted + queued) * ep.max_batch, rows)
            self.due[ep_id] -= taken
            self.running[ep_id] = self.running.get(ep_id, 0) + granted
            self.waiting[ep_id] = self.waiting.get(ep_id, 0) + queued
            # claim_ended: more waiting than running go back, pending again
            surplus = self.waiting[ep_id] - self.running[ep_id]
            if surplus > 0:
                self.waiting[ep_id] -= surplus
                self.due[ep_id] += surplus * ep.max_batch
        self.check_after_claim(free_before, rows_cut=sum(plan.rows) >= self.batch_size)

    def check_after_claim(self, free_before: int, *, rows_cut: bool) -> None:
        """``rows_cut``: the claim took --batch-size rows; the claimer claims again at once."""
        free = self.concurrency - sum(self.running.values())
        for ep_id, rows in self.due.items():
            if rows and not self.running.get(ep_id):
                assert free == 0 or rows_cut, (
                    f"endpoint {ep_id} has due work beside {free} free slots")
                assert self.passed_over[ep_id] <= TURNS, f"endpoint {ep_id} starved"
            else:
                self.passed_over[ep_id] = 0

    @precondition(lambda self: any(self.running.values()))
    @rule(data=st.data())
    def request_ends(self, data: st.DataObject) -> None:
        ep_id = data.draw(st.sampled_from(sorted(i for i, n in self.running.items() if n)))
        for waiting in self.passed_over:
            if self.due[waiting] and not self.running.get(waiting):
                self.passed_over[waiting] += 1
        if self.waiting.get(ep_id):  # its slot goes to the next waiting group
            self.waiting[ep_id] -= 1
        else:
            self.running[ep_id] -= 1

    @invariant()
    def limits_hold(self) -> None:
        assert sum(self.running.values()) <= self.concurrency
        for ep_id, n in self.running.items():
            assert n <= self.endpoints[ep_id].max_in_flight
            assert self.waiting.get(ep_id, 0) <= n


ClaimBookkeeping.TestCase.settings = settings(max_examples=300, stateful_step_count=150,
                                              deadline=None)
TestClaimBookkeeping = ClaimBookkeeping.TestCase
