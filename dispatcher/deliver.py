"""One request for a group of claimed deliveries, and everything that follows from it.

:func:`attempt` encodes, signs and sends. :class:`Deliverer` then applies the
pure decision of ``policy.outcome.decide`` to each delivery: the record goes
to the completer (the one writer of results, a ``410 Gone``'s pause of the
endpoint included), the metrics and the log are told, and a retry schedules
a wake-up for when it comes due. What the answer says of the endpoint goes to the circuit
breaker, shared by the fleet through the completer. A batch the endpoint refuses as too
large (413) is sent again in halves first (``_split``): only the answers to the requests
that were not split are recorded.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

from dispatcher.completer import Completer
from dispatcher.http.sender import HttpSender
from dispatcher.limits import circuit, rate
from dispatcher.observe.attempt_log import AttemptLog, fields
from dispatcher.observe.metrics import Metrics
from dispatcher.observe.throttle import Throttled
from dispatcher.observe.tracing import Tracing
from dispatcher.policy.envelope import encode
from dispatcher.policy.model import AttemptResult, Delivery, Endpoint, Record
from dispatcher.policy.outcome import decide

log = logging.getLogger("dispatcher")
# Out of descriptors, every delivery fails alike: said once a minute, with the count.
_OUT_OF_FILES_LOG = Throttled(60.0)
# A batch refused with 413 is split (``_split``); said once a minute.
_SPLIT_LOG = Throttled(60.0)
# A starved loop's timeouts come many at once: said once a minute, with the count.
_STARVED_LOG = Throttled(60.0)

INTERNAL_ERROR = AttemptResult(error_kind="internal",
                               error="internal error in the dispatcher (see its log)")
"""What an attempt becomes when our own code raised: a failure to retry, then dead-letter.

Without it, an exception in encoding, sending or deciding would end the
delivery task with nothing written: the delivery would stay in flight under
a lease its dispatcher keeps extending, holding back every later event of
its key for as long as the process runs. (A Retry-After date beyond what a
datetime holds once did exactly that.) The endpoint is not blamed for it:
the circuit breaker is not told."""


async def attempt(sender: HttpSender, endpoint: Endpoint, deliveries: list[Delivery],
                  tracing: Tracing | None = None) -> AttemptResult:
    """POST the deliveries (one event, or a batch) to the endpoint, signed for this attempt.

    With ``tracing``, the attempt is a span, and the request carries its context.
    """
    span = tracing.start(endpoint.name, deliveries) if tracing is not None else None
    result = INTERNAL_ERROR
    try:
        headers, body = encode(endpoint, [d.event for d in deliveries], datetime.now(UTC),
                               trace=span.trace if span is not None else None)
        if log.isEnabledFor(logging.DEBUG):  # payloads only at debug level
            log.debug("POST %s to %s: %s", [str(d.event.id) for d in deliveries],
                      endpoint.name, body[:2000].decode("utf-8", "replace"))
        result = await sender.send(endpoint.url, headers, body, endpoint.timeout, endpoint.tls,
                                   guarded=endpoint.guarded)
    finally:
        if span is not None:
            span.end(result)
    return result


class Deliverer:
    """Sends a group's request and records, counts and logs what became of each delivery."""

    def __init__(self, sender: HttpSender, completer: Completer, metrics: Metrics,
                 wake: Callable[[], None], *, tracing: Tracing | None = None) -> None:
        """``completer`` writes every result (a 410's pause included); ``wake`` is called
        when a retry is due; ``tracing`` makes a span of each attempt."""
        self._tracing = tracing
        self._sender = sender
        self._completer = completer
        self._metrics = metrics
        self._wake = wake
        self._failures = AttemptLog(
            log, lambda delay, then: asyncio.get_running_loop().call_later(delay, then))
        # What became of the deliveries this process attempted (--once sums them up).
        self.delivered = 0
        self.retried = 0
        self.dead_lettered = 0

    async def __call__(self, endpoint: Endpoint, deliveries: list[Delivery]) -> bool:
        """One request (more if a batch is refused with 413, see ``_split``); True unless
        the endpoint failed retryably (the breaker's word)."""
        if endpoint.tenant is not None:
            deliveries = self._refuse_foreign(endpoint, deliveries)
            if not deliveries:
                return True
        answered = True
        pieces = [deliveries]  # a stack: the next piece to send last
        while pieces:
            piece = pieces.pop()
            started = time.monotonic()
            try:
                result = await attempt(self._sender, endpoint, piece, self._tracing)
            except Exception:
                log.exception("sending %d deliveries to %s failed in the dispatcher",
                              len(piece), endpoint.name)
                result = INTERNAL_ERROR
            self._sent(endpoint, result)
            if result.status == 413 and len(piece) > 1:
                pieces += _split(endpoint, piece)
                if endpoint.rate_limit:  # the extra requests keep the endpoint's pace
                    await asyncio.sleep(rate.PACE / endpoint.rate_limit)
                continue
            answered = self._settle(endpoint, piece, result, started) and answered
        return answered

    def _refuse_foreign(self, endpoint: Endpoint, deliveries: list[Delivery]) -> list[Delivery]:
        """The deliveries of the endpoint's own tenant; the others become dead letters that
        say why, never sent.

        publish() routes an endpoint that belongs to a tenant only that tenant's events,
        but a delivery may come from elsewhere: a publisher of an earlier release (which
        routes by type alone), an INSERT by hand, or a tenant given to the endpoint after
        the delivery was made. It counts as a failed attempt in its history (which says
        why); the endpoint's circuit breaker is not told.
        """
        own = [d for d in deliveries if d.event.tenant == endpoint.tenant]
        if len(own) == len(deliveries):
            return deliveries
        for delivery in deliveries:
            if delivery.event.tenant == endpoint.tenant:
                continue
            theirs = ("an event without a tenant" if delivery.event.tenant is None
                      else f"an event of tenant {delivery.event.tenant!r}")
            error = (f"not sent: endpoint {endpoint.name} belongs to tenant "
                     f"{endpoint.tenant!r}, and this is {theirs}")
            log.warning("event %s dead-lettered for %s: %s", delivery.event.id,
                        endpoint.name, error, extra={"endpoint": endpoint.name})
            self._metrics.failed(endpoint.name, "other")
            self._metrics.dead(endpoint.name)
            self.dead_lettered += 1
            self._completer.add(Record(delivery.id, delivery.lease_token, "dead", error=error,
                                       reason="other"))
        return own

    def _sent(self, endpoint: Endpoint, result: AttemptResult) -> None:
        """Count a request, whatever came of it."""
        self._metrics.attempt(endpoint.name, result.duration)
        if result.resent:
            self._metrics.resent(endpoint.name)
        if result.error_kind == "internal" and result is not INTERNAL_ERROR:
            _OUT_OF_FILES_LOG.warning(log, "%s (endpoint %s)", result.error, endpoint.name)

    def _settle(self, endpoint: Endpoint, deliveries: list[Delivery],
                result: AttemptResult, started: float) -> bool:
        """Record, count and log what one request's result means for its deliveries; False
        when the endpoint failed retryably."""
        verdict = circuit.verdict(result)  # None for our own trouble: the endpoint is not blamed
        lost = self._metrics.loop_lag.lost_since(started) if verdict == "failed" else 0.0
        if verdict is not None and circuit.starved(result, endpoint, lost):
            _STARVED_LOG.warning(log, "a timeout of %s was not counted by its circuit breaker: "
                                 "this dispatcher's event loop lost %.2f s of the %g s timeout "
                                 "(is the machine's CPU taken?)", endpoint.name, lost,
                                 endpoint.timeout)
        elif verdict is not None:
            self._completer.judge(endpoint.id, verdict, endpoint.breaker_window)
        done = datetime.now(UTC)
        disable = False
        for delivery in deliveries:
            try:
                decision = decide(delivery, endpoint, result, done, random.random,
                                  batch=deliveries)
            except Exception:
                log.exception("deciding the outcome of event %s for %s failed",
                              delivery.event.id, endpoint.name,
                              extra=fields(delivery, endpoint, result.status, None))
                decision = decide(delivery, endpoint, INTERNAL_ERROR, done, random.random)
            outcome = decision.outcome
            if outcome.action == "delivered":
                lag = delivery.age + time.monotonic() - delivery.claimed_at
                self._metrics.delivered(endpoint.name, lag)
                self.delivered += 1
            else:
                self._metrics.failed(endpoint.name, outcome.reason or "other")
            if outcome.action == "dead":
                self._metrics.dead(endpoint.name)
                self.dead_lettered += 1
            if outcome.action != "delivered":
                self._failures.failed(delivery, endpoint, outcome, decision.retry_in, done)
            if decision.retry_in is not None:
                self.retried += 1
                asyncio.get_running_loop().call_later(decision.retry_in, self._wake)
            disable = disable or outcome.disable_endpoint
            self._completer.add(decision.record)
        if disable:
            reason = f"410 Gone at {done.isoformat(timespec='seconds')}"
            log.warning("endpoint %s disabled: %s", endpoint.name, reason,
                        extra={"endpoint": endpoint.name, "status": 410})
            self._completer.disable(endpoint.id, reason)
        return verdict != "failed"


def _split(endpoint: Endpoint, batch: list[Delivery]) -> list[list[Delivery]]:
    """A batch the endpoint refused as too large (413) in two halves, the first to go
    first (last on the stack); said once a minute.

    The halves go in the same request slot, one after the other, before
    anything is recorded: the refused request is no attempt of its events,
    and a half refused again is halved again, down to single events, whose
    413 is permanent. Events of one key are never in one batch (the next
    one of a key waits for the one before), so the halves keep key order.
    """
    _SPLIT_LOG.warning(log, "endpoint %s refused a batch of %d events as too large (413): "
                       "sent again in halves; a lower --max-batch saves the extra requests",
                       endpoint.name, len(batch))
    half = (len(batch) + 1) // 2
    return [batch[half:], batch[:half]]
