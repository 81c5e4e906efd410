"""The quota hook: a check of the application's own, asked before a tenant's events are written.

``set_quota_check(check)`` installs one for the process. ``publish()``,
``publish_many()`` and ``apublish()`` call ``check(conn, tenant, events)``
once per call and per distinct tenant among its events (in the order they
first appear), after the events are validated and before any SQL: a check
that raises stops the call with its own exception, and nothing is written.
The check runs in the caller's transaction, on the connection the caller
passed (a plan table and a monthly count, read there, see docs/concepts.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from outbox._event import Event

QuotaCheck = Callable[[Any, str, list[Event]], "Awaitable[None] | None"]
"""``check(conn, tenant, events)``: raise to refuse; an ``apublish()`` check may be async."""

_installed: QuotaCheck | None = None


def set_quota_check(check: QuotaCheck | None) -> QuotaCheck | None:
    """Install ``check`` for this process (None removes it); returns the one it replaces.

    Called with the connection as given, the tenant, and that tenant's
    events of the call; whatever it raises propagates unchanged and nothing
    of the call is written. Events without a tenant are not checked.
    """
    global _installed  # the hook is process-wide by design
    if check is not None and not callable(check):
        raise TypeError(f"the quota check must be callable, not {type(check).__name__}")
    previous, _installed = _installed, check
    return previous


def _by_tenant(events: Sequence[Event], tenants: Sequence[str | None]) -> dict[str, list[Event]]:
    grouped: dict[str, list[Event]] = {}
    for event, tenant in zip(events, tenants, strict=True):
        if tenant is not None:
            grouped.setdefault(tenant, []).append(event)
    return grouped


def check_sync(conn: Any, events: Sequence[Event], tenants: Sequence[str | None]) -> None:
    """Ask the installed check about each tenant of a blocking call."""
    check = _installed
    if check is None:
        return
    for tenant, theirs in _by_tenant(events, tenants).items():
        answer = check(conn, tenant, theirs)
        if inspect.isawaitable(answer):
            if inspect.iscoroutine(answer):
                answer.close()  # never awaited: no "was never awaited" warning
            raise TypeError("the quota check returned an awaitable, which publish() cannot "
                            "await: use apublish(), or a check that does not await")


async def check_async(conn: Any, events: Sequence[Event],
                      tenants: Sequence[str | None]) -> None:
    """Ask the installed check about each tenant of an awaited call, awaiting its answer."""
    check = _installed
    if check is None:
        return
    for tenant, theirs in _by_tenant(events, tenants).items():
        answer = check(conn, tenant, theirs)
        if inspect.isawaitable(answer):
            await answer
