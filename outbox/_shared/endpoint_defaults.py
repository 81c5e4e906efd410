"""Endpoint option defaults: what ``endpoints add`` leaves out, the columns and the dispatcher.

schema.sql's column defaults are the same (a test keeps them equal). The wire formats
an endpoint may choose are named here too, once for the commands, the dispatcher and
the receiving side.
"""

from typing import Literal

Format = Literal["standard-webhooks", "cloudevents"]
FORMATS: tuple[Format, ...] = ("standard-webhooks", "cloudevents")

DEFAULT_MAX_ATTEMPTS = 42  # with the backoffs below: retried for more than a day
DEFAULT_TIMEOUT = 10.0
DEFAULT_MIN_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 3600.0
DEFAULT_MAX_IN_FLIGHT = 16
DEFAULT_MAX_BATCH = 1
DEFAULT_BREAKER_FAILURES = 10
DEFAULT_BREAKER_COOLDOWN = 30.0
DEFAULT_BREAKER_WINDOW = 30.0
DEFAULT_BREAKER_RATE = 50.0

WhenFull = Literal["refuse", "drop-oldest"]
WHEN_FULL: tuple[WhenFull, ...] = ("refuse", "drop-oldest")
"""What a full backlog does: publish() refuses (the default), or the oldest go."""
