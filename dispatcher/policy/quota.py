"""How many deliveries each endpoint may claim now: slots, rate limits, fairness.

Pure bookkeeping, no I/O, so the claimer's sizing can be read (and
tested) on its own. A claim asks each enabled endpoint for at most its free
request slots (``--max-in-flight`` minus what is running, within the global
``--concurrency``) times its ``--max-batch``, and for a rate-limited endpoint
at most the requests its token bucket allows within a short horizon. The
endpoint order rotates so that, under a full load, no endpoint always comes
first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from dispatcher.policy.model import Endpoint
from dispatcher.policy.ratelimit import TokenBucket

# An endpoint without a rate limit may hold this many times its in-flight slots
# (the rest waits in the dispatcher's memory, leased, and starts as a slot
# frees): one claim then serves several rounds of requests instead of one.
PREFETCH = 2
# A rate-limited endpoint's claims run this many seconds ahead of its tokens:
# enough requests to keep it busy until the claimer looks again, each waiting
# its turn, without one claim per request.
RATE_HORIZON = 0.25


@dataclass(slots=True)
class Plan:
    """The parameters of one claim: endpoint ids and row limits, side by side."""

    endpoint_ids: list[int] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)

    def wanted(self) -> dict[int, int]:
        return dict(zip(self.endpoint_ids, self.limits, strict=True))


class Quotas:
    def __init__(self, clock: Callable[[], float]) -> None:
        """``clock``: monotonic seconds, for the rate limits' token buckets."""
        self._clock = clock
        self.buckets: dict[int, TokenBucket] = {}
        # Endpoints whose last claim took all it asked for: more may be due.
        self.backlogged: set[int] = set()
        # Seconds until a rate-limited endpoint with due work gets a token, when
        # the last plan had to leave it out; the claimer wakes up for it.
        self.throttled: float | None = None
        self._rotate = 0

    def bucket(self, endpoint: Endpoint) -> TokenBucket | None:
        if endpoint.rate_limit is None:
            return None
        bucket = self.buckets.get(endpoint.id)
        if bucket is None or bucket.rate != endpoint.rate_limit:  # new, or its rate changed
            bucket = self.buckets[endpoint.id] = TokenBucket(endpoint.rate_limit, self._clock)
        return bucket

    def plan(self, active: Sequence[Endpoint], in_flight: Mapping[int, int], free: int,
             batch_size: int) -> Plan:
        """Rows each endpoint may claim now; ``free`` request slots overall, rows <= batch.

        ``in_flight`` counts each endpoint's requests running or waiting to
        start; an endpoint may hold PREFETCH times its --max-in-flight of them,
        unless it is rate-limited.
        """
        plan = Plan()
        self.throttled = None
        if active:
            self._rotate = (self._rotate + 1) % len(active)
            active = [*active[self._rotate:], *active[:self._rotate]]
        rows_left = batch_size
        for ep in active:
            if free <= 0 or rows_left <= 0:
                break
            depth = 1 if ep.rate_limit is not None else PREFETCH
            slots = min(ep.max_in_flight * depth - in_flight.get(ep.id, 0), free)
            bucket = self.bucket(ep) if slots > 0 else None
            if bucket is not None:
                slots = min(slots, bucket.available(RATE_HORIZON))
                if slots <= 0 and ep.id in self.backlogged:
                    wait = bucket.wait(RATE_HORIZON)
                    self.throttled = wait if self.throttled is None else min(self.throttled, wait)
            if slots <= 0:
                continue
            rows = min(slots * ep.max_batch, rows_left)
            free -= -(-rows // ep.max_batch)
            rows_left -= rows
            plan.endpoint_ids.append(ep.id)
            plan.limits.append(rows)
        return plan

    def claimed(self, plan: Plan, got: Mapping[int, int]) -> bool:
        """Note what a claim returned; True when some endpoint filled its quota."""
        full = False
        for endpoint_id, limit in plan.wanted().items():
            if got.get(endpoint_id, 0) >= limit:
                self.backlogged.add(endpoint_id)
                full = True
            else:
                self.backlogged.discard(endpoint_id)
        return full
