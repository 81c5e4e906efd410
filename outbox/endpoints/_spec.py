"""Endpoint definitions: everything `endpoints add` and `sync` accept, checked up front.

An :class:`EndpointSpec` is the whole definition of one endpoint, validated
in ``__post_init__``: a spec that exists is one the database and the
dispatcher can use, so the commands can refuse bad input (exit 2) before
they write anything. Defaults equal the column defaults of
``outbox.endpoints`` in schema.sql.

Event patterns are globs over event types: ``*`` matches any run of
characters, dots included (``mail.*`` matches ``mail.received`` and
``mail.received.v2``), ``?`` matches one character. Publishing matches with
SQL ``LIKE``, so each spec also carries its patterns translated to LIKE.

Secrets are ``whsec_<base64>`` or ``env:NAME``, NAME none of the
configuration's (``OUTBOX_*`` but ``OUTBOX_SECRET_*``, ``DATABASE_URL``,
``PG*``); ``outbox._shared.secrets.decode_secret`` turns either into HMAC key bytes,
reading ``env:`` references from the environment mapping it is given (the
dispatcher's snapshot), never from ``os.environ``, refusing other names
there too, for endpoints written into the table by hand, and any variable
whose value is not a ``whsec_`` secret.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from outbox._shared.endpoint_defaults import (
    DEFAULT_BREAKER_COOLDOWN,
    DEFAULT_BREAKER_FAILURES,
    DEFAULT_BREAKER_RATE,
    DEFAULT_BREAKER_WINDOW,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MIN_BACKOFF,
    DEFAULT_TIMEOUT,
    FORMATS,
    Format,
)
from outbox._shared.secrets import check_secret
from outbox.durations import parse_duration
from outbox.endpoints import _checks as checks
from outbox.errors import InvalidEndpoint

# Upper bounds: generous for any real receiver, small enough to catch a typo
# (a timeout of 3000 s where 30 was meant would pin a lease for an hour).
MAX_ATTEMPTS = 100
MAX_TIMEOUT = 300.0
MAX_BACKOFF = 86400.0
MAX_IN_FLIGHT = 1000
MAX_RATE_LIMIT = 100_000.0
MAX_BATCH = 1000
MAX_BREAKER_FAILURES = 1000
MAX_PENDING = 1_000_000_000
MAX_BREAKER_COOLDOWN = 86400.0
MAX_BREAKER_WINDOW = 86400.0

_SECONDS_OPTIONS = ("timeout", "min_backoff", "max_backoff", "breaker_cooldown",
                    "breaker_window")
_INT_OPTIONS = ("max_attempts", "max_in_flight", "max_batch", "breaker_failures",
                "max_pending", "max_pending_per_tenant")


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One endpoint as an operator defines it; invalid values raise InvalidEndpoint.

    ``events`` and ``headers`` are normalised on construction: a tuple of
    patterns, and a dict with lower-cased header names.
    """

    name: str
    url: str
    """The ``http://`` or ``https://`` address the events are POSTed to."""
    events: Sequence[str] = ("*",)
    """Glob patterns over event types (``mail.*``, ``*``); the endpoint gets the events
    whose type matches any of them."""
    secret: str | None = None
    """``whsec_<base64>``, ``env:NAME``, or None for unsigned requests."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Attempts before a delivery is dead-lettered."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds allowed for one HTTP attempt."""
    min_backoff: float = DEFAULT_MIN_BACKOFF
    """Seconds before the first retry; each later one waits about twice as long as the
    one before, up to ``max_backoff``."""
    max_backoff: float = DEFAULT_MAX_BACKOFF
    """The longest wait between two attempts, in seconds (a Retry-After may ask more)."""
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    """Requests to the endpoint at once, over the whole fleet of dispatchers."""
    rate_limit: float | None = None
    """Requests per second, or None for no limit."""
    max_batch: int = DEFAULT_MAX_BATCH
    """Events in one request; above 1 the body is a JSON array."""
    format: Format = "standard-webhooks"
    """The wire format: ``standard-webhooks`` or ``cloudevents``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers, names lower-cased; values printable ASCII."""
    breaker_failures: int = DEFAULT_BREAKER_FAILURES
    """Retryable failures within the breaker's window that open the circuit, when they are
    also ``breaker_rate`` percent of its attempts; 0 turns the breaker off."""
    breaker_cooldown: float = DEFAULT_BREAKER_COOLDOWN
    """Seconds an open circuit waits before its one probe request."""
    breaker_window: float = DEFAULT_BREAKER_WINDOW
    """Seconds of attempts the breaker counts: those that ended this recently."""
    breaker_rate: float = DEFAULT_BREAKER_RATE
    """The share of the window's attempts, in percent (1 to 100), that must have failed
    retryably, besides ``breaker_failures`` of them, for the circuit to open."""
    max_pending: int | None = None
    """publish() refuses events for the endpoint while it holds this many undelivered
    deliveries; None for no bound."""
    max_pending_per_tenant: int | None = None
    """publish() refuses a tenant's events for the endpoint while it holds this many
    undelivered deliveries of that tenant (BacklogFull names the endpoint and the tenant),
    so that one tenant cannot fill the backlog for all: other tenants, and events without
    one, publish as before; None for no bound."""
    send_tracestate: bool = True
    """Whether requests carry the event's W3C ``tracestate`` beside its ``traceparent``
    (cut to 512 characters); false sends ``traceparent`` alone."""
    ca_file: str | None = None
    """A PEM bundle of the certificate authorities the endpoint's TLS certificate is checked
    against instead of the default bundle (an internal CA): an absolute path on the
    dispatcher's filesystem (a mounted Secret), read again when the file changes; None for
    the default bundle."""
    client_cert: str | None = None
    """The client certificate (PEM, its chain after it) presented to the endpoint, for mutual
    TLS: an absolute path on the dispatcher's filesystem, given with ``client_key``, read
    again when the file changes; None for none."""
    client_key: str | None = None
    """The client certificate's private key (PEM, unencrypted): an absolute path on the
    dispatcher's filesystem, given with ``client_cert``; None for none."""
    tenant: str | None = None
    """The tenant the endpoint belongs to: it receives only the events published with that
    tenant (among those its patterns match), so that one customer's endpoint never sees
    another's; None: the matching events of every tenant, and those without one."""

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("name", checks.check_name(self.name))
        put("url", checks.check_url(self.url))
        put("events", checks.check_patterns(self.events))
        put("secret", check_secret(self.secret))
        put("max_attempts", checks.check_int(self.max_attempts, "max_attempts", 1, MAX_ATTEMPTS))
        put("timeout", checks.check_number(self.timeout, "timeout", 0, MAX_TIMEOUT,
                                           low_inclusive=False))
        put("min_backoff", checks.check_number(self.min_backoff, "min_backoff", 0, MAX_BACKOFF,
                                               low_inclusive=True))
        put("max_backoff", checks.check_number(self.max_backoff, "max_backoff", 0, MAX_BACKOFF,
                                               low_inclusive=False))
        if self.min_backoff > self.max_backoff:
            raise InvalidEndpoint(
                f"min_backoff ({self.min_backoff:g} s) must not exceed max_backoff "
                f"({self.max_backoff:g} s)")
        put("max_in_flight", checks.check_int(self.max_in_flight, "max_in_flight", 1,
                                              MAX_IN_FLIGHT))
        if self.rate_limit is not None:
            put("rate_limit", checks.check_number(self.rate_limit, "rate_limit", 0,
                                                  MAX_RATE_LIMIT, low_inclusive=False,
                                                  unit="requests per second"))
        put("max_batch", checks.check_int(self.max_batch, "max_batch", 1, MAX_BATCH))
        if self.format not in FORMATS:
            raise InvalidEndpoint(
                f"must be {' or '.join(FORMATS)}, not {self.format!r}", "format")
        put("headers", checks.check_headers(self.headers))
        put("breaker_failures", checks.check_int(self.breaker_failures, "breaker_failures", 0,
                                                 MAX_BREAKER_FAILURES))
        put("breaker_cooldown", checks.check_number(self.breaker_cooldown, "breaker_cooldown",
                                                    0, MAX_BREAKER_COOLDOWN,
                                                    low_inclusive=False))
        put("breaker_window", checks.check_number(self.breaker_window, "breaker_window",
                                                  0, MAX_BREAKER_WINDOW, low_inclusive=False))
        put("breaker_rate", checks.check_number(self.breaker_rate, "breaker_rate", 1, 100,
                                                low_inclusive=True, unit="percent"))
        if self.max_pending is not None:
            put("max_pending", checks.check_int(self.max_pending, "max_pending", 1,
                                                MAX_PENDING))
        if self.max_pending_per_tenant is not None:
            put("max_pending_per_tenant", checks.check_int(
                self.max_pending_per_tenant, "max_pending_per_tenant", 1, MAX_PENDING))
        if not isinstance(self.send_tracestate, bool):
            raise InvalidEndpoint(f"must be true or false, not {self.send_tracestate!r}",
                                  "send_tracestate")
        for option in ("ca_file", "client_cert", "client_key"):
            put(option, checks.check_path(getattr(self, option), option))
        if ((self.ca_file is not None or self.client_cert is not None)
                and not self.url.lower().startswith("https://")):
            raise InvalidEndpoint("ca_file, client_cert and client_key are for https:// URLs: "
                                  "an http:// endpoint has no TLS to use them in")
        put("tenant", checks.check_tenant(self.tenant))
        if (self.client_cert is None) != (self.client_key is None):
            raise InvalidEndpoint("client_cert and client_key are given together: the "
                                  "certificate and the key that belongs to it")

    @property
    def events_like(self) -> tuple[str, ...]:
        """The event patterns as SQL LIKE patterns, in the same order."""
        return tuple(checks.glob_to_like(p) for p in self.events)

    def columns(self) -> dict[str, Any]:
        """The spec as ``outbox.endpoints`` column values (plain Python, not adapted)."""
        return {
            "name": self.name, "url": self.url, "events": list(self.events),
            "events_like": list(self.events_like), "secret": self.secret,
            "max_attempts": self.max_attempts, "timeout_seconds": self.timeout,
            "min_backoff_seconds": self.min_backoff, "max_backoff_seconds": self.max_backoff,
            "max_in_flight": self.max_in_flight, "rate_limit": self.rate_limit,
            "max_batch": self.max_batch, "format": self.format, "headers": dict(self.headers),
            "breaker_failures": self.breaker_failures,
            "breaker_cooldown_seconds": self.breaker_cooldown,
            "breaker_window_seconds": self.breaker_window,
            "breaker_rate": self.breaker_rate,
            "max_pending": self.max_pending,
            "max_pending_per_tenant": self.max_pending_per_tenant,
            "send_tracestate": self.send_tracestate,
            "ca_file": self.ca_file, "client_cert": self.client_cert,
            "client_key": self.client_key, "tenant": self.tenant,
        }

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, object]) -> EndpointSpec:
        """A spec from loosely typed options, as a sync file or a command line gives them.

        Keys are the field names; an unknown key is refused by name. Numbers
        may be given as text, and the seconds options as durations (``90s``,
        ``2m``); every other check is the constructor's.
        """
        known = {f.name for f in fields(cls)} - {"name"}
        values: dict[str, Any] = {}
        for key, value in options.items():
            if key not in known:
                raise InvalidEndpoint(
                    f"is not a known option; the options are {', '.join(sorted(known))}", key)
            values[key] = _coerce(key, value)
        values.setdefault("url", None)  # the constructor says that it is required
        return cls(name=name, **values)

def _coerce(key: str, value: object) -> object:
    """Text to the number it spells, for the numeric options; anything else unchanged."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if key in _SECONDS_OPTIONS:
            return parse_duration(text).total_seconds()
        if key in _INT_OPTIONS:
            return int(text)
        if key in ("rate_limit", "breaker_rate"):
            return float(text)
    except ValueError:
        what = ("a duration such as 30, 30s or 2m" if key in _SECONDS_OPTIONS
                else "a whole number" if key in _INT_OPTIONS else "a number")
        raise InvalidEndpoint(f"must be {what}, not {value!r}", key) from None
    return value

def parse_header(text: str) -> tuple[str, str]:
    """``NAME:VALUE`` (as ``--header`` takes it) -> (name, value), surrounding spaces dropped."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        # The text is not echoed: it may well be an Authorization header.
        raise InvalidEndpoint("must be NAME:VALUE, such as 'Authorization: Bearer ...'",
                              "header")
    return name.strip(), value.strip(" \t")

def generate_secret() -> str:
    """A fresh ``whsec_`` secret: 32 random bytes, base64."""
    return "whsec_" + base64.b64encode(os.urandom(32)).decode("ascii")

def signing_label(secret: str | None) -> str | None:
    """How a secret may be shown: ``"whsec"``, ``"env:NAME"``, or None; never the key."""
    if secret is None:
        return None
    if secret.startswith("env:"):
        return secret
    return "whsec"
