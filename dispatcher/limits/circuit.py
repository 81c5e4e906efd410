"""The circuit breaker (``--breaker-failures N``): the fleet stops sending to an endpoint
that keeps failing, and probes it once its cool-down is over.

The shared state is ``endpoint_state`` (circuit, opened_at, probe_until, and
the window's buckets of attempts and retryable failures). The claim statement
allows one probe, or none, while a circuit is not closed (``claim`` and
``due_endpoints`` in dispatch.sql); the complete statement folds the
attempts' words into the state (``complete``: changing, judged, circuits).
This module is the Python half:

- :func:`verdict`: what one attempt tells the breaker (an answer, a retryable
  failure, or nothing when the trouble was ours);
- :func:`fold`: one batch's words, per endpoint, as the complete statement
  takes them, with the answers a :class:`Tally` kept while the window held no
  failure; :func:`settle` hands the tally what the statement did not count;
- :func:`passes_on`: whether a request's slot (and the requests waiting for
  it) may go on to the next request of its endpoint here.

A probe that fails retryably is not charged to its delivery: that is
``policy.outcome.decide`` (the attempt's own record), which reads
``Delivery.probe``.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable
from typing import Literal

from dispatcher.policy.model import AttemptResult, Endpoint
from dispatcher.policy.outcome import ERROR_RULES, status_rule

CircuitVerdict = Literal["answered", "failed"]
"""What an attempt tells the circuit breaker: the endpoint answered, or failed retryably."""


def verdict(result: AttemptResult) -> CircuitVerdict | None:
    """What the attempt says of the endpoint: a retryable failure, or an answer.

    Any HTTP answer that is not a retryable failure (2xx, a permanent 4xx, a
    redirect) shows the endpoint up. An address refused before connecting,
    or the dispatcher's own trouble, says nothing about it.
    """
    if result.status is not None:
        rule, _ = status_rule(result.status)
        return "failed" if rule == "retry" else "answered"
    if result.error_kind == "internal":
        return None
    if result.error_kind is None or ERROR_RULES[result.error_kind][0] == "retry":
        return "failed"
    return None


class Tally:
    """The answers this dispatcher kept to itself, per endpoint, for the breaker's window.

    While an endpoint's window holds no failure, the complete statement does
    not touch its state row, so that a healthy endpoint's results cost no
    write of the row the whole fleet shares. Its answers still count: they
    wait here, in buckets of a fifth of the window on this process's clock,
    and go with the next batch that reports a failure (the share is then
    taken of every attempt of the window, not of the failures alone). Those
    older than the window are dropped.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        """``clock``: monotonic seconds (this module keeps no clock of its own)."""
        self._clock = clock
        self._kept: dict[int, deque[list[float]]] = {}  # endpoint -> [[bucket start, answers]]

    def earlier(self, endpoint_id: int, window: float) -> int:
        """Answers kept for the endpoint that ended within the last window (and a fifth)."""
        buckets = self._kept.get(endpoint_id)
        if not buckets:
            return 0
        start = self._clock() - window - window / 5
        while buckets and buckets[0][0] < start:
            buckets.popleft()
        return int(sum(count for _, count in buckets))

    def keep(self, endpoint_id: int, window: float, answers: int) -> None:
        """Keep answers that the window did not count."""
        now = self._clock()
        buckets = self._kept.setdefault(endpoint_id, deque())
        if buckets and now - buckets[-1][0] < window / 5:
            buckets[-1][1] += answers
        else:
            buckets.append([now, answers])

    def forget(self, endpoint_id: int) -> None:
        """The window counted them."""
        self._kept.pop(endpoint_id, None)


def fold(verdicts: Iterable[tuple[int, CircuitVerdict, float]], tally: Tally) -> str:
    """One batch's verdicts as the complete statement's ``circuits``: per endpoint
    [endpoint_id, answered, failures, earlier], ``earlier`` the answers the tally kept."""
    state: dict[int, tuple[int, int, float]] = {}
    for endpoint_id, said, window in verdicts:
        answered, failures, _ = state.get(endpoint_id, (0, 0, window))
        state[endpoint_id] = ((answered + 1, failures, window) if said == "answered"
                              else (answered, failures + 1, window))
    return json.dumps([[ep, answered, failures, tally.earlier(ep, window)]
                       for ep, (answered, failures, window) in state.items()])


def settle(verdicts: Iterable[tuple[int, CircuitVerdict, float]], tally: Tally,
           counted: frozenset[int]) -> None:
    """After the batch was written: the window counted the endpoints in ``counted``;
    the others' answers are kept for later."""
    for endpoint_id, said, window in verdicts:
        if endpoint_id in counted:
            tally.forget(endpoint_id)
        elif said == "answered":
            tally.keep(endpoint_id, window, 1)


STARVED_SHARE = 0.25
"""A timeout does not vote when the event loop lost this share of the attempt's timeout."""


def starved(result: AttemptResult, endpoint: Endpoint, lost: float) -> bool:
    """Whether a failed attempt was a timeout measured by a starved loop: while it was in
    flight, the event loop lost ``lost`` seconds (``observe.loop_lag``), at least a quarter
    of the endpoint's timeout. The answer may have come in time and waited for the loop:
    the timeout says little of the endpoint, so the breaker is not told (the attempt stays
    a failed attempt of its delivery, retried, logged and counted as any other)."""
    return result.error_kind == "timeout" and lost >= STARVED_SHARE * endpoint.timeout


def passes_on(endpoint: Endpoint, answered: bool) -> bool:
    """Whether the slot of a request that ended may serve the endpoint's next request here.

    Not after a retryable failure with a breaker on: the slot goes back, and so do
    the requests waiting for it, so that nothing more is sent until a claim has
    looked at the circuit again.
    """
    return answered or not endpoint.breaker_failures
