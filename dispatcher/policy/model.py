"""The dispatcher's plain data: what a claim hands out, what an attempt returns, what is recorded.

Frozen dataclasses with no behaviour, shared by the pure policy modules
(``signing``, ``backoff``, ``outcome``) and the I/O shells (the claimer, the
HTTP sender, the completer), so that each can be tested without the others.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from outbox._shared.endpoint_defaults import (
    DEFAULT_BREAKER_FAILURES,
    DEFAULT_BREAKER_WINDOW,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MIN_BACKOFF,
    DEFAULT_TIMEOUT,
    Format,
)

FailureReason = Literal["timeout", "connect", "http_4xx", "http_5xx", "other"]
ErrorKind = Literal["timeout", "connect", "blocked", "internal", "other"]
"""``internal``: the dispatcher's own trouble (a bug, no file descriptor left), not the
endpoint's: retried, and never a vote of its circuit breaker."""


class TlsFiles(NamedTuple):
    """An endpoint's own TLS files, paths on this process's filesystem (None: not given).

    One ``ssl.SSLContext`` is made per distinct set (``dispatcher.http.tls``)
    and shared by every connection that uses it; a set is also part of the
    connection pool's key, so a connection made with one identity never
    carries another endpoint's request.
    """

    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An endpoint as the dispatcher uses it, secrets already resolved to key bytes."""

    id: int
    name: str
    url: str
    # Signing keys, newest first: the current secret, then those still inside
    # their rotation overlap. Empty: requests are not signed.
    keys: tuple[bytes, ...] = ()
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: float = DEFAULT_TIMEOUT
    min_backoff: float = DEFAULT_MIN_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    rate_limit: float | None = None
    max_batch: int = DEFAULT_MAX_BATCH
    format: Format = "standard-webhooks"
    headers: Mapping[str, str] = field(default_factory=dict)
    breaker_failures: int = DEFAULT_BREAKER_FAILURES  # 0: no circuit breaker
    breaker_window: float = DEFAULT_BREAKER_WINDOW  # seconds of attempts the breaker counts
    send_tracestate: bool = True  # False: traceparent alone goes out
    tls: TlsFiles | None = None  # its CA bundle and client certificate; None: the defaults
    # The tenant it belongs to: it is sent no other tenant's event (deliver.foreign);
    # None: every tenant's.
    tenant: str | None = None
    # Saved with its URL checked (outbox.endpoints' check_url=True): the private-network
    # guard applies to its connections whatever --block-private-networks says.
    guarded: bool = False
    trace_context: bool = True  # False: neither traceparent nor tracestate goes out


@dataclass(frozen=True, slots=True)
class EventData:
    """One event as it goes on the wire."""

    id: uuid.UUID
    type: str
    key: str | None
    payload: str  # the producer's JSON text, byte for byte
    headers: Mapping[str, str]
    created_at: datetime
    # The W3C trace context it was published in, as stored; None: none.
    traceparent: str | None = None
    tracestate: str | None = None
    tenant: str | None = None  # the tenant it belongs to; None: none (sent as before)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One claimed delivery: an event for an endpoint, leased to this dispatcher."""

    id: int
    endpoint_id: int
    event: EventData
    attempts: int  # including the attempt about to be made
    lease_token: uuid.UUID
    probe: bool = False  # sent as the probe of a circuit that was open
    # The event's age in seconds at the claim, by the database clock, and when that
    # was by this process's monotonic clock: their sum with the time since is the
    # delivery lag, right whatever this process's wall clock says.
    age: float = 0.0
    claimed_at: float = 0.0


class ClaimRow(NamedTuple):
    """One row of the claim statement, its columns by name (dispatch.sql, "claim": the
    SELECT list, in this order). The one place the claim's row shape is written down."""

    id: int
    endpoint_id: int
    attempts: int
    lease_token: uuid.UUID
    event_id: uuid.UUID
    type: str
    key: str | None
    payload: str
    headers: str | None
    created_at: datetime
    grp: int  # the request it goes in, per endpoint
    slot: int | None  # the slot that request starts in; None: it waits for one
    slot_token: uuid.UUID | None
    send_in: float  # seconds until the request's turn under a rate limit
    probe: bool
    age: float
    traceparent: str | None  # the W3C trace context the event was published in, if any
    tracestate: str | None
    size: int  # the payload's length in bytes (UTF-8), as the database counts it
    # Where the endpoint's next claim may start (dispatcher/floors.py): the earliest
    # pending row from its floor on that this claim did not take (None: none), the
    # claim's now() and its snapshot's xmin and xmax, the same on every row.
    next_pending: datetime | None
    db_now: datetime
    xmin: int
    xmax: int
    tenant: str | None  # the event's tenant, None: none
    turn_at: datetime | None = None  # its rate-limit turn (database clock); None: no limit

    def delivery(self, claimed_at: float) -> Delivery:
        """The delivery this row leases; ``claimed_at``: the claim's start, monotonic."""
        return Delivery(
            id=self.id, endpoint_id=self.endpoint_id, attempts=self.attempts,
            lease_token=self.lease_token, probe=self.probe, age=self.age,
            claimed_at=claimed_at,
            event=EventData(id=self.event_id, type=self.type, key=self.key,
                            payload=self.payload, headers=json.loads(self.headers or "{}"),
                            created_at=self.created_at, traceparent=self.traceparent,
                            tracestate=self.tracestate, tenant=self.tenant))


@dataclass(frozen=True, slots=True)
class Slot:
    """A request slot of an endpoint (``--max-in-flight``), leased to this dispatcher."""

    endpoint_id: int
    slot: int
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one HTTP attempt produced: a status, or an error before any status."""

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    body_excerpt: str = ""  # first bytes of the response body, decoded leniently
    error_kind: ErrorKind | None = None
    error: str = ""  # short, redacted description of the error
    duration: float = 0.0  # seconds spent on the attempt
    reason: str = ""  # the status line's reason phrase, as the server wrote it
    resent: bool = False  # sent again on a new connection: the reused one closed unanswered


@dataclass(frozen=True, slots=True)
class Record:
    """What to write for one delivery after an attempt: the completer's unit of work."""

    delivery_id: int
    lease_token: uuid.UUID
    # pending: to be retried after delay; released: handed back, never sent
    state: Literal["delivered", "pending", "dead", "released"]
    delay: float = 0.0  # seconds until the retry, for "pending"
    error: str | None = None
    status: int | None = None
    refund: bool = False  # the attempt the claim charged is taken back
    # A failed attempt's reason (outbox_delivery_failures_total's label): the
    # attempt goes into the history; None for a success or a hand-back.
    reason: FailureReason | None = None
    duration: float | None = None  # seconds the attempt took; None: never sent

    def as_row(self) -> list[object]:
        """This record as one element of the complete statement's ``results`` (dispatch.sql,
        "complete": the order it reads them in). The one place that order is written down."""
        return [self.delivery_id, str(self.lease_token), self.state, self.delay, self.error,
                self.status, self.refund, self.reason, self.duration]


class CircuitChange(NamedTuple):
    """A circuit the complete statement moved: endpoint, state before, state after."""

    endpoint_id: int
    was: str
    now: str


class Completed(NamedTuple):
    """The complete statement's one row: what it wrote, the circuits it moved, and the
    endpoints whose breaker window counted the batch."""

    written: frozenset[int]  # deliveries whose result was written (their lease still held)
    changed: tuple[CircuitChange, ...]
    counted: frozenset[int] = frozenset()  # endpoints whose state row took the batch

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Completed:
        """Read the row: ``written`` (bigint[]), ``changed`` (json, parsed by psycopg) and
        ``counted`` (bigint[])."""
        written, changed, counted = row
        return cls(frozenset(written), tuple(CircuitChange(*change) for change in changed),
                   frozenset(counted))
