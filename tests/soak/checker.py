"""The soak's invariant checker: what the receiver saw and what was published, judged.

Pure: it takes the receiver's journal (every request with its events, times
and answer), what the producers committed and rolled back, and the
endpoints' limits, and counts every way a promise could have been broken.
The soak (``tests/soak/chaos.py``) gathers those and prints the report.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request as the receiver answered it."""

    endpoint: str
    events: tuple[str, ...]  # event ids, in the body's order
    key: str | None          # the events' key (one request, one key, or none)
    status: int
    start: float             # arrival, seconds (time.time())
    end: float               # the answer, or when the sender gave up on it
    tenant: str | None = None  # the events' tenant (a request holds one tenant's)


@dataclass(frozen=True, slots=True)
class Event:
    """One event a producer published, as far as the producer knows."""

    id: str
    key: str | None
    endpoints: tuple[str, ...]  # the endpoints it is routed to
    seq: int                     # publish order (outbox.events.seq); 0 if rolled back
    committed_at: float          # time.time() after the commit returned
    rolled_back: bool = False
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    max_in_flight: int
    rate_limit: float | None = None


FAIR_AHEAD = 200
"""The noisy tenant's requests that may begin at the shared endpoint between a quiet
tenant's commit and its event's first request, at the 95th percentile: in turns, about what
the fleet has in flight and prefetched there (a few dozen); in publish order, what is left
of the noisy tenant's burst (up to thousands). The percentile leaves out the events whose
dispatcher was killed holding them (they wait for the lease while the others go on)."""


@dataclass(slots=True)
class Report:
    events: int = 0
    delivered: int = 0
    lost: int = 0
    rolled_back_sent: int = 0
    order_violations: int = 0
    limit_violations: int = 0
    duplicates: int = 0
    duplicates_allowed: int = 0
    kills: int = 0
    pg_restarts: int = 0
    breaker_opens: int = 0
    max_lag_seconds: float = 0.0  # commit to first 2xx answer
    # Deliveries seen due, claimable (endpoint enabled, circuit closed, a slot free, not
    # behind their key) and unclaimed for longer than the soak's threshold, and the longest
    # such wait seen (sampled from the database while the run goes on).
    starved: int = 0
    max_unclaimed_seconds: float = 0.0
    lag_p50_seconds: float = 0.0
    lag_p99_seconds: float = 0.0
    # Fair turns: per quiet tenant's event at the shared endpoint, the noisy tenant's
    # requests that began there between its commit and its own first request.
    fair_events: int = 0
    fair_ahead_p95: int = 0
    fair_ahead_max: int = 0
    notes: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return (self.lost == 0 and self.rolled_back_sent == 0 and self.order_violations == 0
                and self.limit_violations == 0 and self.duplicates <= self.duplicates_allowed
                and self.starved == 0 and self.fair_ahead_p95 <= FAIR_AHEAD)

    def summary(self) -> dict[str, object]:
        """The report's last line: every figure, as one JSON object."""
        return {"events": self.events, "delivered": self.delivered, "lost": self.lost,
                "rolled_back_sent": self.rolled_back_sent,
                "order_violations": self.order_violations,
                "limit_violations": self.limit_violations, "duplicates": self.duplicates,
                "duplicates_allowed": self.duplicates_allowed, "kills": self.kills,
                "pg_restarts": self.pg_restarts, "breaker_opens": self.breaker_opens,
                "lag_p50_seconds": round(self.lag_p50_seconds, 3),
                "lag_p99_seconds": round(self.lag_p99_seconds, 3),
                "max_lag_seconds": round(self.max_lag_seconds, 3), "starved": self.starved,
                "max_unclaimed_seconds": round(self.max_unclaimed_seconds, 3),
                "fair_events": self.fair_events, "fair_ahead_p95": self.fair_ahead_p95,
                "fair_ahead_max": self.fair_ahead_max, "ok": self.ok()}


def _success(arrival: Arrival) -> bool:
    return 200 <= arrival.status < 300


def most_at_once(intervals: Iterable[tuple[float, float]]) -> int:
    """The largest number of intervals open at one moment (an end before a start at ties)."""
    points = sorted(itertools.chain.from_iterable(((s, 1), (e, -1)) for s, e in intervals),
                    key=lambda p: (p[0], p[1]))
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


def busiest_second(starts: Sequence[float]) -> int:
    """The most requests that began within any one second (a window [t, t + 1))."""
    ordered = sorted(starts)
    best, first = 0, 0
    for last, moment in enumerate(ordered):
        while moment - ordered[first] >= 1.0:
            first += 1
        best = max(best, last - first + 1)
    return best


def check(arrivals: Sequence[Arrival], published: Sequence[Event],
          limits: dict[str, Limits], report: Report) -> Report:
    """Fill ``report`` from the journal and the producers' record."""
    committed = [e for e in published if not e.rolled_back]
    rolled_back = {e.id for e in published if e.rolled_back}
    report.events = len(committed)
    by_id = {e.id: e for e in committed}

    lags: list[float] = []
    successes: dict[tuple[str, str], list[float]] = defaultdict(list)
    for arrival in arrivals:
        for event_id in arrival.events:
            if event_id in rolled_back:
                report.rolled_back_sent += 1
            if _success(arrival):
                successes[(arrival.endpoint, event_id)].append(arrival.end)

    for event in committed:
        for endpoint in event.endpoints:
            times = successes.get((endpoint, event.id))
            if not times:
                report.lost += 1
                continue
            report.delivered += 1
            report.duplicates += len(times) - 1
            lags.append(min(times) - event.committed_at)
    if lags:
        lags.sort()
        report.lag_p50_seconds = lags[len(lags) // 2]
        report.lag_p99_seconds = lags[int(len(lags) * 0.99)]
        report.max_lag_seconds = lags[-1]

    report.order_violations = _order_violations(arrivals, by_id)
    report.limit_violations = _limit_violations(arrivals, limits, report.notes)
    _fairness(arrivals, committed, report)
    return report


def _fairness(arrivals: Sequence[Arrival], committed: Sequence[Event], report: Report,
              endpoint: str = "shared", noisy: str = "noisy") -> None:
    """Per quiet tenant's event at ``endpoint``: the ``noisy`` tenant's requests that began
    there between the event's commit and its first request (any answer)."""
    noisy_starts = sorted(a.start for a in arrivals
                          if a.endpoint == endpoint and a.tenant == noisy)
    first: dict[str, float] = {}
    for arrival in arrivals:
        if arrival.endpoint == endpoint and arrival.tenant != noisy:
            for event_id in arrival.events:
                first[event_id] = min(first.get(event_id, arrival.start), arrival.start)
    ahead = sorted(
        bisect.bisect_left(noisy_starts, first[e.id])
        - bisect.bisect_right(noisy_starts, e.committed_at)
        for e in committed
        if endpoint in e.endpoints and e.tenant != noisy and e.id in first)
    if ahead:
        report.fair_events = len(ahead)
        report.fair_ahead_p95 = max(0, ahead[int(len(ahead) * 0.95)])
        report.fair_ahead_max = max(0, ahead[-1])


def _order_violations(arrivals: Sequence[Arrival], by_id: dict[str, Event]) -> int:
    """Per endpoint, tenant and key: a request for an event published before one already
    delivered, or two requests of one key at once."""
    violations = 0
    by_key: dict[tuple[str, str | None, str], list[Arrival]] = defaultdict(list)
    for arrival in arrivals:
        if arrival.key is not None:  # key order is per tenant
            by_key[(arrival.endpoint, arrival.tenant, arrival.key)].append(arrival)
    for requests in by_key.values():
        requests.sort(key=lambda a: a.start)
        delivered_up_to = 0
        for arrival in requests:
            seqs = [by_id[i].seq for i in arrival.events if i in by_id]
            if seqs and min(seqs) < delivered_up_to:
                violations += 1
            if _success(arrival) and seqs:
                delivered_up_to = max(delivered_up_to, *seqs)
        if most_at_once((a.start, a.end) for a in requests) > 1:
            violations += 1
    return violations


def _limit_violations(arrivals: Sequence[Arrival], limits: dict[str, Limits],
                      notes: list[str]) -> int:
    """Requests beyond each endpoint's limits; a note per endpoint (one in all when many)."""
    violations = 0
    by_endpoint: dict[str, list[Arrival]] = defaultdict(list)
    for arrival in arrivals:
        by_endpoint[arrival.endpoint].append(arrival)
    lines: list[str] = []
    for endpoint, limit in limits.items():
        mine = by_endpoint.get(endpoint, [])
        peak = most_at_once((a.start, a.end) for a in mine)
        lines.append(f"{endpoint}: at most {peak} requests at once "
                     f"(--max-in-flight {limit.max_in_flight})")
        if peak > limit.max_in_flight:
            violations += peak - limit.max_in_flight
        if limit.rate_limit is not None:
            busiest = busiest_second([a.start for a in mine])
            lines.append(f"{endpoint}: at most {busiest} requests in one second "
                         f"(--rate-limit {limit.rate_limit:g})")
            if busiest > limit.rate_limit:
                violations += busiest - int(limit.rate_limit)
    shown = 3
    notes += lines if len(limits) <= 10 else [
        *lines[:shown], f"... and {len(lines) - shown} more such lines: {violations} "
        "requests beyond the endpoints' limits in all"]
    return violations
