"""outbox-dispatcher's producer library: publish events inside your own transaction.

>>> event_id = outbox.publish(conn, "mail.received", {"message_id": 42}, key="thread-7")

The event exists exactly when the caller's transaction commits; the
``outbox-dispatcher`` sidecar then delivers it over HTTP to every endpoint
subscribed to its type, at least once. On the receiving side,
:mod:`outbox.receive` verifies a delivery and records, in the receiver's own
transaction, that its work was done once.
"""

from outbox import receive
from outbox._event import MAX_PAYLOAD_BYTES, Event
from outbox._publish import apublish, apublish_many, publish, publish_many
from outbox._quota import set_quota_check
from outbox.errors import (
    BacklogFull,
    InvalidEvent,
    OutboxError,
    PayloadTooLarge,
    SchemaMissing,
)


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed package's metadata on first use (with the
    commit, from a git checkout: ``outbox._shared.version``).

    Lazy: importlib.metadata costs an application ~25 ms at import time,
    for a string it rarely asks for.
    """
    if name == "__version__":
        from outbox._shared.version import current

        found = current()
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'outbox' has no attribute {name!r}")


__all__ = [
    "MAX_PAYLOAD_BYTES",
    "BacklogFull",
    "Event",
    "InvalidEvent",
    "OutboxError",
    "PayloadTooLarge",
    "SchemaMissing",
    "__version__",
    "apublish",
    "apublish_many",
    "publish",
    "publish_many",
    "receive",
    "set_quota_check",
]
