"""The application's arguments, checked before any SQL runs: pure, one rule each.

What ``outbox.endpoints``' functions take besides the endpoint options
(which ``EndpointSpec`` checks): the tenant guard, the yes-or-no switches,
the secret an application may give, the delivery log's filters. Each failure
is an :class:`~outbox.errors.InvalidEndpoint` naming the argument as the
function spells it (``as_tenant``, ``force``, ``limit``), in words an
application may show its customers: no command-line flag, no secret.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from outbox._shared.secrets import check_secret
from outbox.endpoints._checks import check_name, check_patterns, check_tenant
from outbox.errors import InvalidEndpoint

STATES = ("pending", "in_flight", "delivered", "dead", "discarded")
"""A delivery's states, as ``deliveries(state=)`` takes them."""
MAX_LIMIT = 1000
"""The most rows one page of the delivery log holds."""
_CURSOR = re.compile(r"1-([0-9a-f]{1,16})")


def name(value: object) -> str:
    """An endpoint's name as the functions take it (InvalidEndpoint naming ``name``)."""
    return check_name(value)


def guard(as_tenant: object) -> str | None:
    """The tenant a call acts for (None: no guard), a tenant as events carry one."""
    try:
        return check_tenant(as_tenant)
    except InvalidEndpoint as exc:
        raise InvalidEndpoint(exc.problem, "as_tenant") from None


def tenant(value: object) -> str | None:
    """A ``tenant=`` filter or setting (None: none)."""
    return check_tenant(value)


def switch(value: object, field: str) -> bool:
    """A yes-or-no argument: True or False, nothing that merely looks like one."""
    if not isinstance(value, bool):
        raise InvalidEndpoint(f"must be True or False, not {value!r}", field)
    return value


def own_tenant(given: object, as_tenant: str | None) -> str | None:
    """``add``'s tenant: under the guard the guard's, and any other ``tenant=`` refused."""
    if as_tenant is None:
        return tenant(given)
    if given is not None and given != as_tenant:
        raise InvalidEndpoint("must be as_tenant's, or left out: under as_tenant the "
                              "endpoint is that tenant's", "tenant")
    return as_tenant


def secret(value: object, *, allow_env: object) -> str | None:
    """A secret the application gives: a ``whsec_`` one, or None (a new one, on ``add``).

    ``env:NAME`` names a variable of the dispatcher's environment, which is
    its operator's to name: refused unless the call says ``allow_env_secret=True``
    (code of the operator's own, never a value a customer typed).
    """
    allowed = switch(allow_env, "allow_env_secret")
    if isinstance(value, str) and value.startswith("env:") and not allowed:
        raise InvalidEndpoint("must be a whsec_ secret, or None for a new one; env:NAME "
                              "secrets are read from the dispatcher's environment, and "
                              "need allow_env_secret=True", "secret")
    return check_secret(value)


def event_ids(value: object, field: str = "event_ids") -> list[uuid.UUID] | None:
    """Event ids (UUIDs, or their text), at least one; None: not given."""
    if value is None:
        return None
    if isinstance(value, str | uuid.UUID) or not isinstance(value, Sequence) or not value:
        raise InvalidEndpoint("must be a list of event ids (UUIDs), at least one", field)
    return [event_id(item, field) for item in value]


def event_id(value: object, field: str = "event_id") -> uuid.UUID:
    """One event id: a UUID, or its text."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str) and len(value) <= 64:
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise InvalidEndpoint(f"must be an event id (a UUID), not {_short(value)}", field)


def moment(value: object, field: str) -> datetime | timedelta | None:
    """A point in time: a datetime (naive meaning UTC), or a timedelta meaning that long
    ago on the database clock; None: not given."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    raise InvalidEndpoint("must be a datetime, or a timedelta meaning that long ago, not "
                          f"{_short(value)}", field)


def types(value: object) -> list[str]:
    """Glob patterns over event types, as ``events=`` takes them; none: every type."""
    if value is None:
        return []
    try:
        return list(check_patterns(value))
    except InvalidEndpoint as exc:
        raise InvalidEndpoint(exc.problem, "types") from None


def state(value: object) -> str | None:
    """A delivery state to keep (None: every state)."""
    if value is not None and value not in STATES:
        raise InvalidEndpoint(f"must be one of {', '.join(STATES)}, not {_short(value)}",
                              "state")
    return value


def limit(value: object) -> int:
    """How many rows a page holds."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise InvalidEndpoint(f"must be a whole number from 1 to {MAX_LIMIT}, not "
                              f"{_short(value)}", "limit")
    return value


def cursor_of(delivery_id: int) -> str:
    """The opaque ``cursor`` of a row of the delivery log: where the next page starts."""
    return f"1-{delivery_id:x}"


def before(value: object) -> int | None:
    """``before=``: a row's ``cursor``, read back (None: from the newest)."""
    if value is None:
        return None
    match = _CURSOR.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidEndpoint("must be the cursor of a row deliveries() returned", "before")
    return int(match.group(1), 16)


def _short(value: object) -> str:
    """A value in a message, cut: what a customer typed may be long."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
