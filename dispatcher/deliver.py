"""One HTTP attempt for a group of claimed deliveries, and what each one becomes.

:func:`attempt` encodes and sends; :func:`decide` is pure: from the attempt's
result, a delivery's attempt count and its endpoint's policy it makes the
:class:`~dispatcher.completer.Record` to write (delivered, pending again after
a backoff, or dead) with the :class:`~dispatcher.outcome.Outcome` behind it.
The engine only counts and queues what comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from dispatcher.backoff import next_attempt_delay
from dispatcher.completer import Record
from dispatcher.http import HttpSender
from dispatcher.model import AttemptResult, Delivery, Endpoint
from dispatcher.outcome import Outcome, classify
from dispatcher.signing import encode

log = logging.getLogger("dispatcher")


async def attempt(sender: HttpSender, endpoint: Endpoint,
                  deliveries: list[Delivery]) -> AttemptResult:
    """POST the deliveries (one event, or a batch) to the endpoint, signed for this attempt."""
    headers, body = encode(endpoint, [d.event for d in deliveries], datetime.now(UTC))
    if log.isEnabledFor(logging.DEBUG):  # payloads only at debug level
        log.debug("POST %s to %s: %s", [str(d.event.id) for d in deliveries],
                  endpoint.name, body[:2000].decode("utf-8", "replace"))
    return await sender.send(endpoint.url, headers, body, endpoint.timeout)


@dataclass(frozen=True, slots=True)
class Decision:
    record: Record
    outcome: Outcome
    retry_in: float | None = None  # seconds until the retry, when there is one


def decide(delivery: Delivery, endpoint: Endpoint, result: AttemptResult, now: datetime,
           rand: Callable[[], float]) -> Decision:
    """The record to write for one delivery after an attempt."""
    outcome = classify(result, delivery.attempts, endpoint.max_attempts, now)
    if outcome.action == "delivered":
        return Decision(Record(delivery.id, delivery.lease_token, "delivered",
                               status=outcome.last_status), outcome)
    if outcome.action == "dead":
        return Decision(Record(delivery.id, delivery.lease_token, "dead",
                               error=outcome.last_error, status=outcome.last_status), outcome)
    delay = next_attempt_delay(delivery.attempts, endpoint, outcome.retry_after, rand)
    return Decision(Record(delivery.id, delivery.lease_token, "pending", delay=delay,
                           error=outcome.last_error, status=outcome.last_status),
                    outcome, delay)
