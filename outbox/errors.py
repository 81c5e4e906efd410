"""The exceptions a producer can see.

::

    OutboxError                     anything raised on purpose by this package
    ├── InvalidEvent (ValueError)   bad type, payload, key, headers, delay...
    │   └── BacklogFull             an endpoint's --max-pending bound is reached
    ├── PayloadTooLarge             serialized payload over the limit
    ├── SchemaMissing               the outbox schema is not in the database
    ├── InvalidEndpoint (ValueError)  bad endpoint name, URL, pattern, secret, option
    │   └── EndpointExists          a live endpoint already has that name
    ├── EndpointNotFound (LookupError)  no live endpoint has that name
    ├── EndpointBusy                removal refused: undelivered deliveries remain
    ├── EventsNotFound (LookupError)  replay named event ids the database does not hold
    ├── InvalidSignature            receiving: no or wrong signature, timestamp out of tolerance
    └── InvalidDelivery             receiving: signed, but not a delivery of either format

Input errors are raised before any SQL runs, so the caller's transaction is
untouched and can still commit its other work. Driver errors raised while
executing our SQL are not wrapped: the caller's own error handling for its
database (serialization failures, lost connections) keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence

from outbox._shared.text import counted


class OutboxError(Exception):
    """Base class of every error this package raises on purpose."""


def _held(count: int) -> str:
    return counted(count, "undelivered delivery", "undelivered deliveries")


class InvalidEvent(OutboxError, ValueError):
    """The event cannot be published as given (type, payload, key, headers...)."""


class BacklogFull(InvalidEvent):
    """An endpoint the event is routed to holds ``bound`` or more undelivered deliveries.

    Raised by publish() after a look at the database, unlike the other
    InvalidEvent cases (documented among them, hence the class),
    and having written nothing: the caller's transaction goes on unharmed,
    with or without the event. ``endpoint`` is the endpoint's name, ``bound``
    its ``--max-pending``, ``backlog`` what it held; with ``tenant``, the bound
    is the endpoint's ``--max-pending-per-tenant`` and the backlog that tenant's.
    """

    def __init__(self, endpoint: str, bound: int, backlog: int, *,
                 tenant: str | None = None) -> None:
        if tenant is None:
            super().__init__(f"endpoint {endpoint!r} holds {_held(backlog)}, "
                             f"at or past its bound of {bound} (--max-pending): nothing was "
                             "published")
        else:
            super().__init__(f"endpoint {endpoint!r} holds {_held(backlog)} "
                             f"of tenant {tenant!r}, at or past its bound of {bound} "
                             "(--max-pending-per-tenant): nothing was published")
        self.endpoint = endpoint
        self.bound = bound
        self.backlog = backlog
        self.tenant = tenant


class PayloadTooLarge(OutboxError):
    """The serialized payload is larger than the limit (1 MiB by default)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"payload is {size} bytes serialized; the limit is {limit} bytes")
        self.size = size
        self.limit = limit


class SchemaMissing(OutboxError):
    """The ``outbox`` schema is missing: run ``outbox migrate`` first."""


class InvalidEndpoint(OutboxError, ValueError):
    """An endpoint definition cannot be used as given.

    ``field`` names the offending option as spelled in a sync file
    (``max_attempts``), or is None when the problem is not one option's;
    ``problem`` is the message without that name, so that the command line
    can say ``--max-attempts ...`` and a sync file ``endpoints.x.max_attempts ...``.
    Messages never repeat a secret's value.
    """

    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(f"{field} {problem}" if field else problem)
        self.field = field
        self.problem = problem


class EndpointExists(InvalidEndpoint):
    """``add`` was given a name that a live endpoint already has (whoever's it is).

    The message speaks of no command, so that an application may show it to
    its customers; the ``outbox`` command adds how to change the endpoint.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"an endpoint named {name!r} already exists")
        self.name = name


class EndpointNotFound(OutboxError, LookupError):
    """No live (not removed) endpoint has this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no endpoint named {name}")
        self.name = name


class EndpointBusy(OutboxError):
    """Removal refused: the endpoints still have undelivered deliveries.

    ``undelivered`` maps each endpoint name to its count of pending and
    in-flight deliveries; ``force=True`` (``--force``) turns them into dead
    letters instead. ``refusal`` is the message without that remedy, so that
    the command line can name its flag where the functions name their argument.
    """

    def __init__(self, undelivered: dict[str, int]) -> None:
        parts = ", ".join(f"endpoint {name!r} ({_held(count)})"
                          for name, count in sorted(undelivered.items()))
        self.refusal = f"refusing to remove {parts}: pending or in flight"
        super().__init__(f"{self.refusal}; force=True makes them dead letters and removes "
                         "anyway")
        self.undelivered = dict(undelivered)


class EventsNotFound(OutboxError, LookupError):
    """Replay was given event ids that the database does not hold (never, or purged)."""

    def __init__(self, missing: Sequence[str]) -> None:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5
                                          else "")
        noun = "event" if len(missing) == 1 else "events"
        super().__init__(f"no {noun} with id {shown}; nothing was replayed")
        self.missing = list(missing)


class InvalidSignature(OutboxError):
    """A request did not prove it comes from the dispatcher (``outbox.receive``).

    No or wrong ``webhook-signature``, missing ``webhook-id`` or
    ``webhook-timestamp``, or a timestamp outside the tolerance. A receiver
    answers 401. The message names the check that failed, never a secret.
    """


class InvalidDelivery(OutboxError):
    """A correctly signed request whose body or headers are not a delivery of either format.

    A receiver answers 400 (a 4xx: the dispatcher dead-letters it at once).
    """
