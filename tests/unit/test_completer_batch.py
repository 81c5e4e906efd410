"""What a batch of results tells the circuit breaker: per endpoint, reset and failures after."""

from __future__ import annotations

import json

from dispatcher.completer import _Batch


def test_failures_count_after_the_last_answer_of_each_endpoint() -> None:
    """In attempt order: an answer resets the count, failures after it are what is added."""
    batch = _Batch(verdicts=[(1, "failed"), (1, "failed"), (2, "answered"), (1, "answered"),
                             (1, "failed"), (3, "failed"), (3, "failed")])
    assert json.loads(batch.circuits_json()) == [[1, True, 1], [2, True, 0], [3, False, 2]]


def test_no_verdicts_no_circuits() -> None:
    """A batch of records alone says nothing about circuits."""
    assert _Batch().circuits_json() == "[]"
