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


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_batch_counts_answers_and_failures_per_endpoint() -> None:
    """Per endpoint: the batch's answers, its retryable failures, and the answers kept."""
    tally = circuit.Tally(_Clock())
    tally.keep(1, 30.0, 4)
    verdicts: list[tuple[int, circuit.CircuitVerdict, float]] = [
        (1, "failed", 30.0), (1, "failed", 30.0), (2, "answered", 30.0),
        (1, "answered", 30.0), (3, "failed", 30.0)]
    assert json.loads(circuit.fold(verdicts, tally)) == [
        [1, 1, 2, [4, 0, 0, 0, 0, 0]], [2, 1, 0, []], [3, 0, 1, []]]


def test_no_verdicts_no_circuits() -> None:
    """A batch of records alone says nothing about circuits."""
    assert circuit.fold([], circuit.Tally(_Clock())) == "[]"


def test_the_tally_keeps_answers_in_the_windows_buckets_and_forgets_the_rest() -> None:
    """Answers not counted are kept in the bucket (a fifth of the window, on the epoch) they
    ended in; counted ones forgotten; those out of the window's six buckets dropped."""
    clock = _Clock()  # 1000 s: bucket 500 of a 10 s window
    tally = circuit.Tally(clock)
    verdicts: list[tuple[int, circuit.CircuitVerdict, float]] = [
        (1, "answered", 10.0), (1, "answered", 10.0), (2, "answered", 10.0)]
    circuit.settle(verdicts, tally, frozenset({2}))
    assert (tally.earlier(1, 10.0), tally.earlier(2, 10.0)) == ([2, 0, 0, 0, 0, 0], [])
    clock.now += 5.0
    tally.keep(1, 10.0, 3)
    assert tally.earlier(1, 10.0) == [3, 0, 2, 0, 0, 0]
    clock.now += 8.0  # bucket 506: the first answers' bucket, 500, is out of the six
    assert tally.earlier(1, 10.0) == [0, 0, 0, 0, 3, 0]
    tally.forget(1)
    assert tally.earlier(1, 10.0) == []


@pytest.mark.parametrize(("kind", "lost", "starved"), [
    ("timeout", 0.3, True), ("timeout", 0.2, False), ("connect", 5.0, False)])
def test_a_timeout_of_a_starved_loop_does_not_vote(kind: str, lost: float,
                                                  starved: bool) -> None:
    """A timeout while the loop lost a quarter of the timeout or more is not the endpoint's."""
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/", timeout=1.0)
    result = AttemptResult(error_kind=kind)  # type: ignore[arg-type]
    assert circuit.starved(result, endpoint, lost) is starved


@pytest.mark.parametrize(("breaker_failures", "answered", "passes"), [
    (5, True, True), (5, False, False), (0, False, True), (0, True, True)])
def test_a_slot_passes_on_unless_a_breaker_heard_a_failure(breaker_failures: int,
                                                           answered: bool,
                                                           passes: bool) -> None:
    """After a retryable failure with a breaker on, the slot and its followers go back."""
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/",
                        breaker_failures=breaker_failures)
    assert circuit.passes_on(endpoint, answered) is passes
