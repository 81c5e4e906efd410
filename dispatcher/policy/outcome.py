"""What an HTTP attempt means for its deliveries: delivered, retried, or dead-lettered.

:func:`classify` reads the result; :func:`decide` adds the delivery's attempt
count and its endpoint's backoff, and makes the :class:`Record` to write.

The documented rules, as tables a reader can check against the docs:

- 2xx: delivered.
- Timeouts, connection errors, 408, 425, 429 and 5xx: retried with backoff
  (``Retry-After`` honoured), dead once the attempts run out.
- 3xx: redirects are not followed, and a receiver that moved will not move
  back by itself, so dead at once; counted with reason ``other``.
- Other 4xx: the request itself is wrong; dead at once.
- 410 Gone: dead, and the endpoint is disabled.
- Refused by ``--block-private-networks``: dead at once, counted as
  ``connect`` (no connection was made).
- 1xx or a status outside 100-599, or any other error: retried, reason
  ``other``.
- The dispatcher's own trouble (error kind ``internal``: a bug of ours, no
  file descriptor left): retried, reason ``other``, and the endpoint is not
  blamed: no circuit breaker vote.

``last_error`` is the text stored in the database, shown by ``outbox dead
list`` and logged. It reads like the answer: ``HTTP 413 Request Entity Too
Large: <the start of its body>``, the body of an HTML page as its text,
without tags (``policy.page_text``). It is built only from the response
(status, reason phrase, body excerpt, ``Location``) and from the HTTP
layer's own short error text, never from the request, so the signature,
the secrets and custom auth headers cannot reach it through this module;
a receiver that echoes the request back can still
put them in its body, so ``policy.redact`` masks them (signatures, secrets,
credentials, custom header values, in the spellings an echo gives them).
Control characters are removed (the text ends up in terminals and log
lines) and the length is capped (an error page must not bloat the row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from dispatcher.policy.backoff import next_attempt_delay, parse_retry_after
from dispatcher.policy.model import (
    AttemptResult,
    Delivery,
    Endpoint,
    ErrorKind,
    FailureReason,
    Record,
)
from dispatcher.policy.page_text import looks_like_html, page_text
from dispatcher.policy.redact import Sent, redact

Action = Literal["delivered", "retry", "dead"]
# What a result says before the attempt count is considered.
AttemptVerdict = Literal["success", "retry", "permanent", "gone"]

MAX_ERROR_LENGTH: Final = 500
"""``last_error`` is cut to this many characters."""
_REASON_CHARS: Final = 100
"""Of the status line's reason phrase (any text a server likes), this much is kept."""

# Status codes with their own rule; they win over the class rules below.
STATUS_RULES: Final[dict[int, tuple[AttemptVerdict, FailureReason]]] = {
    408: ("retry", "http_4xx"),  # Request Timeout
    410: ("gone", "http_4xx"),  # Gone: dead, and the endpoint is disabled
    425: ("retry", "http_4xx"),  # Too Early
    429: ("retry", "http_4xx"),  # Too Many Requests
}
# By the status's first digit; anything else (0xx, 6xx and up) is "other", retried.
CLASS_RULES: Final[dict[int, tuple[AttemptVerdict, FailureReason | None]]] = {
    1: ("retry", "other"),  # informational as a final answer: a broken server
    2: ("success", None),
    3: ("permanent", "other"),  # redirects are not followed
    4: ("permanent", "http_4xx"),
    5: ("retry", "http_5xx"),
}
# Failures before any status.
ERROR_RULES: Final[dict[ErrorKind, tuple[AttemptVerdict, FailureReason, str]]] = {
    "timeout": ("retry", "timeout", "timeout"),
    "connect": ("retry", "connect", "connection failed"),
    "blocked": ("permanent", "connect", "address refused by the private-network guard"),
    "internal": ("retry", "other", "request failed"),  # ours: the circuit is not told
    "other": ("retry", "other", "request failed"),
}
_OTHER_STATUS: Final[tuple[AttemptVerdict, FailureReason]] = ("retry", "other")

# C0 and C1 controls, and the bidirectional overrides that can disguise text.
_UNSAFE: Final = dict.fromkeys(
    (*range(0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F),
     *range(0x2066, 0x206A)),
    " ",
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one attempt, ready for the database and the metrics."""

    action: Action
    reason: FailureReason | None = None  # outbox_delivery_failures_total label; None on success
    last_error: str | None = None
    last_status: int | None = None
    retry_after: float | None = None  # seconds the server asked for, when retrying
    disable_endpoint: bool = False


def clean_error(text: str, sent: Sent | None = None) -> str:
    """``text`` safe to store and print: secrets masked, controls removed, length capped.

    Masking comes first, on the whole text: the cap may then cut only the
    mask, never leave the start of a secret. ``sent`` is what the request
    carried (see ``policy.redact``).
    """
    text = redact(text, sent)
    text = " ".join(text.translate(_UNSAFE).split())
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 1] + "…"
    return text


def status_rule(status: int) -> tuple[AttemptVerdict, FailureReason | None]:
    """What a status says before the attempt count is considered, and its failure reason."""
    rule = STATUS_RULES.get(status)
    if rule is not None:
        return rule
    if 100 <= status <= 599:
        return CLASS_RULES[status // 100]
    return _OTHER_STATUS


def _status_error(result: AttemptResult, status: int, sent: Sent | None) -> str:
    """``HTTP 413 Request Entity Too Large: <the start of the answer's text>``."""
    text = f"HTTP {status}"
    if result.reason:
        text += f" {result.reason[:_REASON_CHARS]}"
    if 300 <= status <= 399:
        location = result.headers.get("location")
        text += ": redirects are not followed"
        if location:
            text += f" (location: {location})"
    answer = result.body_excerpt
    if answer and looks_like_html(answer, result.headers):
        # Masked before the tags go too: a secret the markup splits is masked whole.
        answer = page_text(redact(answer, sent))
    if answer:
        text += f": {answer}"
    return text


def classify(result: AttemptResult, attempts: int, max_attempts: int, now: datetime, *,
             sent: Sent | None = None) -> Outcome:
    """The outcome of an attempt, the ``attempts``-th of at most ``max_attempts``.

    ``now`` measures an HTTP-date ``Retry-After``; ``sent`` is what the
    request carried that an echo in ``last_error`` must not show.
    """
    status = result.status
    if status is not None:
        verdict, reason = status_rule(status)
        if verdict == "success":  # the common case: no error text to build
            return Outcome("delivered", last_status=status)
        error = _status_error(result, status, sent)
    elif result.error_kind is not None:
        verdict, reason, label = ERROR_RULES[result.error_kind]
        error = f"{label}: {result.error}" if result.error else label
    else:
        verdict, reason, error = "retry", "other", result.error or "no response"

    if verdict == "success":
        return Outcome("delivered", last_status=status)
    last_error = clean_error(error, sent)
    if verdict == "gone":
        return Outcome("dead", reason, last_error, status, disable_endpoint=True)
    if verdict == "permanent" or attempts >= max_attempts:
        return Outcome("dead", reason, last_error, status)
    retry_after = parse_retry_after(result.headers.get("retry-after"), now)
    return Outcome("retry", reason, last_error, status, retry_after)


@dataclass(frozen=True, slots=True)
class Decision:
    """One delivery's record to write, the outcome behind it, and when it is retried."""

    record: Record
    outcome: Outcome
    retry_in: float | None = None  # seconds until the retry, when there is one


def decide(delivery: Delivery, endpoint: Endpoint, result: AttemptResult, now: datetime,
           rand: Callable[[], float], *, batch: Sequence[Delivery] = ()) -> Decision:
    """The record to write for one delivery after an attempt; ``rand`` draws the jitter;
    ``batch``: the deliveries sent in the same request (their payloads are masked too).

    A circuit's probe that fails retryably is not charged: the circuit was
    open because the endpoint is down, not because of this delivery, so the
    probe is retried (after its backoff, so the next probe may be another
    delivery) with its attempts as they were, and never dead-lettered for it.
    """
    limit = delivery.attempts + 1 if delivery.probe else endpoint.max_attempts
    # What the request carried matters only to a last_error: a success (the usual
    # case, once per delivered event) does not pay for collecting it.
    succeeded = result.status is not None and status_rule(result.status)[0] == "success"
    outcome = classify(result, delivery.attempts, limit, now,
                       sent=None if succeeded else Sent.of(endpoint, delivery, batch))
    duration = round(result.duration, 6)
    if outcome.action == "delivered":
        return Decision(Record(delivery.id, delivery.lease_token, "delivered",
                               status=outcome.last_status, duration=duration), outcome)
    if outcome.action == "dead":
        return Decision(Record(delivery.id, delivery.lease_token, "dead",
                               error=outcome.last_error, status=outcome.last_status,
                               reason=outcome.reason or "other", duration=duration), outcome)
    delay = next_attempt_delay(delivery.attempts, endpoint, outcome.retry_after, rand)
    return Decision(Record(delivery.id, delivery.lease_token, "pending", delay=delay,
                           error=outcome.last_error, status=outcome.last_status,
                           refund=delivery.probe, reason=outcome.reason or "other",
                           duration=duration),
                    outcome, delay)
