"""Endpoint definitions: everything `endpoints add` and `sync` accept, checked up front.

An :class:`EndpointSpec` is the whole definition of one endpoint, validated
in ``__post_init__``: a spec that exists is one the database and the
dispatcher can use, so the commands can refuse bad input (exit 2) before
they write anything. Each field but the name is a row of the options table
(``_options``), which gives its default (the column's default in schema.sql
too), how text is read into it and its check; here it gets its type and its
documentation. The rules between two options are here (``_RULES``).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from outbox._shared.endpoint_defaults import Format, WhenFull
from outbox.endpoints import _checks as checks
from outbox.endpoints._options import BY_FIELD, KEY_COLUMN, OPTIONS, default
from outbox.errors import InvalidEndpoint


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One endpoint as an operator defines it; invalid values raise InvalidEndpoint.

    ``events`` and ``headers`` are normalised on construction: a tuple of
    patterns, and a dict with lower-cased header names.
    """

    name: str
    url: str
    """The ``http://`` or ``https://`` address the events are POSTed to."""
    events: Sequence[str] = default("events")
    """Glob patterns over event types (``mail.*``, ``*``); the endpoint gets the events
    whose type matches any of them."""
    secret: str | None = default("secret")
    """``whsec_<base64>``, ``env:NAME``, or None for unsigned requests."""
    max_attempts: int = default("max_attempts")
    """Attempts before a delivery is dead-lettered."""
    timeout: float = default("timeout")
    """Seconds allowed for one HTTP attempt."""
    min_backoff: float = default("min_backoff")
    """Seconds before the first retry; each later one waits about twice as long as the
    one before, up to ``max_backoff``."""
    max_backoff: float = default("max_backoff")
    """The longest wait between two attempts, in seconds (a Retry-After may ask more)."""
    max_in_flight: int = default("max_in_flight")
    """Requests to the endpoint at once, over the whole fleet of dispatchers."""
    rate_limit: float | None = default("rate_limit")
    """Requests per second, or None for no limit."""
    max_batch: int = default("max_batch")
    """Events in one request; above 1 the body is a JSON array."""
    format: Format = default("format")  # noqa: RUF009 (a str)
    """The wire format: ``standard-webhooks`` or ``cloudevents``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers, names lower-cased; values printable ASCII."""
    breaker_failures: int = default("breaker_failures")
    """Retryable failures within the breaker's window that open the circuit, when they are
    also ``breaker_rate`` percent of its attempts; 0 turns the breaker off."""
    breaker_cooldown: float = default("breaker_cooldown")
    """Seconds an open circuit waits before its one probe request."""
    breaker_window: float = default("breaker_window")
    """Seconds of attempts the breaker counts: those that ended this recently."""
    breaker_rate: float = default("breaker_rate")
    """The share of the window's attempts, in percent (1 to 100), that must have failed
    retryably, besides ``breaker_failures`` of them, for the circuit to open."""
    max_pending: int | None = default("max_pending")
    """publish() refuses events for the endpoint while it holds this many undelivered
    deliveries; None for no bound."""
    max_pending_per_tenant: int | None = default("max_pending_per_tenant")
    """publish() refuses a tenant's events for the endpoint while it holds this many
    undelivered deliveries of that tenant (BacklogFull names the endpoint and the tenant),
    so that one tenant cannot fill the backlog for all: other tenants, and events without
    one, publish as before; None for no bound."""
    send_tracestate: bool = default("send_tracestate")
    """Whether requests carry the event's W3C ``tracestate`` beside its ``traceparent``
    (cut to 512 characters); false sends ``traceparent`` alone."""
    ca_file: str | None = default("ca_file")
    """A PEM bundle of the certificate authorities the endpoint's TLS certificate is checked
    against instead of the default bundle (an internal CA): an absolute path on the
    dispatcher's filesystem (a mounted Secret), read again when the file changes; None for
    the default bundle."""
    client_cert: str | None = default("client_cert")
    """The client certificate (PEM, its chain after it) presented to the endpoint, for mutual
    TLS: an absolute path on the dispatcher's filesystem, given with ``client_key``, read
    again when the file changes; None for none."""
    client_key: str | None = default("client_key")
    """The client certificate's private key (PEM, unencrypted): an absolute path on the
    dispatcher's filesystem, given with ``client_cert``; None for none."""
    tenant: str | None = default("tenant")
    """The tenant the endpoint belongs to: it receives only the events published with that
    tenant (among those its patterns match), so that one customer's endpoint never sees
    another's; None: the matching events of every tenant, and those without one."""
    description: str | None = default("description")
    """The endpoint's own label (the customer's, in a portal): free text of at most 200
    printable characters, shown beside its name; None for none."""
    when_full: WhenFull = default("when_full")  # noqa: RUF009 (a str)
    """What a full backlog does (``max_pending``, ``max_pending_per_tenant``): ``refuse``,
    publish() raises BacklogFull; ``drop-oldest``, publish() never refuses for it, and the
    dispatcher discards the endpoint's (or the tenant's) oldest pending deliveries until it
    holds the bound again, never one in flight. ``drop-oldest`` needs ``max_pending``."""
    keep_dead: float | None = default("keep_dead")
    """Seconds a dead letter is kept before the retention discards it; None: kept until
    retried or discarded."""
    trace_context: bool = default("trace_context")
    """Whether requests carry the event's W3C trace context (``traceparent``, and
    ``tracestate`` as ``send_tracestate`` says); false sends neither, whatever span
    publish() ran in (a customer's endpoint need not learn the sender's traces)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", checks.check_name(self.name))
        for option in OPTIONS:
            object.__setattr__(self, option.field, option.clean(getattr(self, option.field)))
            for rule in _RULES.get(option.field, ()):
                rule(self)

    @property
    def events_like(self) -> tuple[str, ...]:
        """The event patterns as SQL LIKE patterns, in the same order."""
        return tuple(checks.glob_to_like(p) for p in self.events)

    def columns(self) -> dict[str, Any]:
        """The spec as ``outbox.endpoints`` column values (plain Python, not adapted)."""
        values: dict[str, Any] = {KEY_COLUMN: self.name}
        for option in OPTIONS:
            value = getattr(self, option.field)
            values[option.column] = option.to_column(value)
            if option.derived is not None:
                values[option.derived[0]] = option.derived[1](value)
        return values

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, object]) -> EndpointSpec:
        """A spec from loosely typed options, as a sync file or a command line gives them.

        Keys are the field names; an unknown key is refused by name. Numbers
        may be given as text, and the seconds options as durations (``90s``,
        ``2m``); every other check is the constructor's.
        """
        values: dict[str, Any] = {}
        for key, value in options.items():
            option = BY_FIELD.get(key)
            if option is None:
                raise InvalidEndpoint(
                    f"is not a known option; the options are {', '.join(sorted(BY_FIELD))}", key)
            values[key] = option.read(value)
        values.setdefault("url", None)  # the constructor says that it is required
        return cls(name=name, **values)


def _backoffs_in_order(spec: EndpointSpec) -> None:
    if spec.min_backoff > spec.max_backoff:
        raise InvalidEndpoint(
            f"min_backoff ({spec.min_backoff:g} s) must not exceed max_backoff "
            f"({spec.max_backoff:g} s)")


def _tls_is_for_https(spec: EndpointSpec) -> None:
    if ((spec.ca_file is not None or spec.client_cert is not None)
            and not spec.url.lower().startswith("https://")):
        raise InvalidEndpoint("ca_file, client_cert and client_key are for https:// URLs: "
                              "an http:// endpoint has no TLS to use them in")


def _cert_with_its_key(spec: EndpointSpec) -> None:
    if (spec.client_cert is None) != (spec.client_key is None):
        raise InvalidEndpoint("client_cert and client_key are given together: the "
                              "certificate and the key that belongs to it")


def _dropping_needs_a_bound(spec: EndpointSpec) -> None:
    if spec.when_full == "drop-oldest" and spec.max_pending is None:
        raise InvalidEndpoint("drop-oldest needs max_pending: the bound past which the "
                              "oldest pending deliveries are discarded", "when_full")


_RULES: dict[str, tuple[Callable[[EndpointSpec], None], ...]] = {
    "max_backoff": (_backoffs_in_order,),
    "client_key": (_tls_is_for_https,),
    "tenant": (_cert_with_its_key,),
    "when_full": (_dropping_needs_a_bound,),
}
"""Rules between options, each run once the option it is filed under is checked (the
options are checked in the table's order)."""


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
