"""What each delivery becomes after an attempt: the record written, and the retry delay."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from dispatcher.policy.model import AttemptResult, Delivery, Endpoint, EventData
from dispatcher.policy.outcome import decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENDPOINT = Endpoint(id=1, name="e", url="http://127.0.0.1/", max_attempts=3,
                    min_backoff=2.0, max_backoff=60.0)


def _delivery(attempts: int) -> Delivery:
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload="{}", headers={},
                      created_at=NOW)
    return Delivery(id=7, endpoint_id=1, event=event, attempts=attempts,
                    lease_token=uuid.uuid4())


def test_success_is_recorded_delivered_with_its_status() -> None:
    """A 2xx answer becomes a delivered record keeping the status."""
    decision = decide(_delivery(1), ENDPOINT, AttemptResult(status=204), NOW, lambda: 0.5)
    assert decision.record.state == "delivered"
    assert decision.record.status == 204
    assert decision.retry_in is None


def test_retryable_failure_goes_back_to_pending_after_a_backoff() -> None:
    """A 503 before the last attempt is pending again, due after a backoff within bounds."""
    decision = decide(_delivery(1), ENDPOINT, AttemptResult(status=503), NOW, lambda: 0.5)
    assert decision.record.state == "pending"
    assert decision.retry_in is not None
    assert 2.0 <= decision.retry_in <= 60.0
    assert decision.record.delay == decision.retry_in
    assert decision.record.error


def test_last_attempt_or_permanent_failure_is_dead() -> None:
    """The attempts used up, or a permanent 4xx, make a dead letter with its error."""
    for attempts, status in ((3, 503), (1, 404)):
        decision = decide(_delivery(attempts), ENDPOINT, AttemptResult(status=status), NOW,
                          lambda: 0.5)
        assert decision.record.state == "dead"
        assert decision.record.status == status
        assert decision.retry_in is None


def _probe(attempts: int) -> Delivery:
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload="{}", headers={},
                      created_at=NOW)
    return Delivery(id=8, endpoint_id=1, event=event, attempts=attempts,
                    lease_token=uuid.uuid4(), probe=True)


def test_a_failed_probe_is_refunded_and_never_dead_for_its_attempts() -> None:
    """A circuit's probe failing retryably, even on its last attempt: pending, refunded."""
    decision = decide(_probe(3), ENDPOINT, AttemptResult(status=503), NOW, lambda: 0.5)
    assert decision.record.state == "pending"
    assert decision.record.refund is True
    assert decision.retry_in is not None


def test_a_probe_answered_permanently_is_dead_like_any_delivery() -> None:
    """A probe the endpoint refuses for good (404) is a dead letter, not refunded."""
    decision = decide(_probe(1), ENDPOINT, AttemptResult(status=404), NOW, lambda: 0.5)
    assert decision.record.state == "dead"
    assert decision.record.refund is False
