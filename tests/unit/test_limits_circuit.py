"""The circuit breaker's Python half: each attempt's verdict, their folding per batch, and
whether a slot passes on after a failure (the SQL half: tests/integration/test_fleet_sql.py)."""

from __future__ import annotations

import json

import pytest

from dispatcher.limits import circuit
from dispatcher.policy.model import AttemptResult, Endpoint


@pytest.mark.parametrize(("result", "verdict"), [
    (AttemptResult(status=200), "answered"),
    (AttemptResult(status=404), "answered"),
    (AttemptResult(status=301), "answered"),
    (AttemptResult(status=410), "answered"),
    (AttemptResult(status=503), "failed"),
    (AttemptResult(status=429), "failed"),
    (AttemptResult(status=408), "failed"),
    (AttemptResult(status=150), "failed"),
    (AttemptResult(error_kind="timeout"), "failed"),
    (AttemptResult(error_kind="connect"), "failed"),
    (AttemptResult(error_kind="other"), "failed"),
    (AttemptResult(error_kind="blocked"), None),
    (AttemptResult(error_kind="internal"), None),
])
def test_verdict(result: AttemptResult, verdict: str | None) -> None:
    """Retryable failures count against the circuit; any other answer resets it; a refused
    address, or the dispatcher's own trouble (out of descriptors), says nothing of the
    endpoint."""
    assert circuit.verdict(result) == verdict


def test_failures_count_after_the_last_answer_of_each_endpoint() -> None:
    """In attempt order: an answer resets the count, failures after it are what is added."""
    verdicts: list[tuple[int, circuit.CircuitVerdict]] = [
        (1, "failed"), (1, "failed"), (2, "answered"), (1, "answered"), (1, "failed"),
        (3, "failed"), (3, "failed")]
    assert json.loads(circuit.fold(verdicts)) == [[1, True, 1], [2, True, 0], [3, False, 2]]


def test_no_verdicts_no_circuits() -> None:
    """A batch of records alone says nothing about circuits."""
    assert circuit.fold([]) == "[]"


@pytest.mark.parametrize(("breaker_failures", "answered", "passes"), [
    (5, True, True), (5, False, False), (0, False, True), (0, True, True)])
def test_a_slot_passes_on_unless_a_breaker_heard_a_failure(breaker_failures: int,
                                                           answered: bool,
                                                           passes: bool) -> None:
    """After a retryable failure with a breaker on, the slot and its followers go back."""
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/",
                        breaker_failures=breaker_failures)
    assert circuit.passes_on(endpoint, answered) is passes
