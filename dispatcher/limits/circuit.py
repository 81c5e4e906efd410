"""The circuit breaker (``--breaker-failures N``): the fleet stops sending to an endpoint
that keeps failing, and probes it once its cool-down is over.

The shared state is ``endpoint_state`` (circuit, failures, opened_at,
probe_until). The claim statement allows one probe, or none, while a circuit
is not closed (``claim`` and ``due_endpoints`` in dispatch.sql); the complete
statement folds the attempts' words into the state (``complete``: changing,
judged, circuits). This module is the Python half:

- :func:`verdict`: what one attempt tells the breaker (an answer, a retryable
  failure, or nothing when the trouble was ours);
- :func:`fold`: one batch's words, per endpoint, as the complete statement
  takes them;
- :func:`passes_on`: whether a request's slot (and the requests waiting for
  it) may go on to the next request of its endpoint here.

A probe that fails retryably is not charged to its delivery: that is
``policy.outcome.decide`` (the attempt's own record), which reads
``Delivery.probe``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
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


def fold(verdicts: Iterable[tuple[int, CircuitVerdict]]) -> str:
    """Verdicts in the order the attempts ended, as the complete statement's ``circuits``:
    per endpoint [endpoint_id, reset, failures], reset when an answer came, then the
    retryable failures after the last answer."""
    state: dict[int, tuple[bool, int]] = {}
    for endpoint_id, said in verdicts:
        reset, failures = state.get(endpoint_id, (False, 0))
        state[endpoint_id] = (True, 0) if said == "answered" else (reset, failures + 1)
    return json.dumps([[ep, reset, failures] for ep, (reset, failures) in state.items()])


def passes_on(endpoint: Endpoint, answered: bool) -> bool:
    """Whether the slot of a request that ended may serve the endpoint's next request here.

    Not after a retryable failure with a breaker on: the slot goes back, and so do
    the requests waiting for it, so that nothing more is sent until a claim has
    looked at the circuit again.
    """
    return answered or not endpoint.breaker_failures
