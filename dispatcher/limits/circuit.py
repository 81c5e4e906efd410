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
import math
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


BUCKETS = 6
"""The breaker's window is counted in six buckets of a fifth of the window each, on the
epoch (the database's ``circuit_window_v2``)."""


class Tally:
    """The answers this dispatcher kept to itself, per endpoint, for the breaker's window.

    While an endpoint's window holds no failure, the complete statement does
    not touch its state row, so that a healthy endpoint's results cost no
    write of the row the whole fleet shares. Its answers still count: they
    wait here, in the window's buckets (a fifth of the window each, on the
    epoch, as the database counts them), and go with the next batch that
    reports a failure, each into its own bucket (the share is then taken of
    every attempt of the window, not of the failures alone). Those older than
    the window are dropped.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        """``clock``: seconds since the epoch (this module keeps no clock of its own)."""
        self._clock = clock
        self._kept: dict[int, dict[int, int]] = {}  # endpoint -> {bucket: answers}

    def _bucket(self, window: float) -> int:
        return math.floor(self._clock() / (window / (BUCKETS - 1)))

    def earlier(self, endpoint_id: int, window: float) -> list[int]:
        """The answers kept for the endpoint per bucket of the window, newest first."""
        kept = self._kept.get(endpoint_id)
        if not kept:
            return []
        now = self._bucket(window)
        for bucket in [b for b in kept if b <= now - BUCKETS]:
            del kept[bucket]
        return [kept.get(now - age, 0) for age in range(BUCKETS)]

    def keep(self, endpoint_id: int, window: float, answers: int) -> None:
        """Keep answers that the window did not count."""
        kept = self._kept.setdefault(endpoint_id, {})
        bucket = self._bucket(window)
        kept[bucket] = kept.get(bucket, 0) + answers

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
