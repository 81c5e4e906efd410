"""The exceptions a producer can see.

::

    OutboxError                     anything raised on purpose by this package
    ├── InvalidEvent (ValueError)   bad type, payload, key, headers, delay...
    ├── PayloadTooLarge             serialized payload over the limit
    └── SchemaMissing               the outbox schema is not in the database

Input errors are raised before any SQL runs, so the caller's transaction is
untouched and can still commit its other work. Driver errors raised while
executing our SQL are not wrapped: the caller's own error handling for its
database (serialization failures, lost connections) keeps working.
"""

from __future__ import annotations


class OutboxError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidEvent(OutboxError, ValueError):
    """The event cannot be published as given (type, payload, key, headers...)."""


class PayloadTooLarge(OutboxError):
    """The serialized payload is larger than the limit (1 MiB by default)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"payload is {size} bytes serialized; the limit is {limit} bytes")
        self.size = size
        self.limit = limit


class SchemaMissing(OutboxError):
    """The ``outbox`` schema is missing: run ``outbox migrate`` first."""
