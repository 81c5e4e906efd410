"""The receiving side: verify a delivery, then do its work once, in your own transaction.

>>> verifier = receive.Verifier(["whsec_new...", "whsec_old..."])  # format="cloudevents" too
>>> events = verifier.verify(request.headers, raw_body)      # list[receive.Received]
>>> with psycopg.connect(dsn) as conn:
...     for ev in events:
...         if receive.first_time(conn, ev.id, consumer="archive"):
...             apply_change(conn, ev.data)                  # once per event and consumer

A verifier reads the one format its endpoint sends (``standard-webhooks``, the
default, or ``cloudevents``) and refuses a request in the other or mixing
both: headers outside the signature never choose how the body is read.
A receiver answers 401 to :class:`InvalidSignature`, 400 to
:class:`InvalidDelivery`, 2xx once the work is committed (or skipped as a
duplicate) and 5xx when it failed, so that the dispatcher retries.
``docs/receiving.md`` has examples for Starlette and Flask.
"""

from outbox.errors import InvalidDelivery, InvalidSignature
from outbox.receive._formats import Headers, Received
from outbox.receive._record import DEFAULT_CONSUMER, afirst_time, first_time
from outbox.receive._verify import DEFAULT_TOLERANCE, Verifier

__all__ = [
    "DEFAULT_CONSUMER",
    "DEFAULT_TOLERANCE",
    "Headers",
    "InvalidDelivery",
    "InvalidSignature",
    "Received",
    "Verifier",
    "afirst_time",
    "first_time",
]
