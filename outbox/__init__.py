"""outbox-dispatcher's producer library: publish events inside your own transaction.

>>> event_id = outbox.publish(conn, "mail.received", {"message_id": 42}, key="thread-7")

The event exists exactly when the caller's transaction commits; the
``outbox-dispatcher`` sidecar then delivers it over HTTP to every enabled
endpoint subscribed to its type, at least once.
"""

from outbox._event import MAX_PAYLOAD_BYTES, Event
from outbox._publish import apublish, apublish_many, publish, publish_many
from outbox.errors import InvalidEvent, OutboxError, PayloadTooLarge, SchemaMissing

__version__ = "0.1.0"

__all__ = [
    "MAX_PAYLOAD_BYTES",
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
]
