"""The delivery log from the application: :func:`deliveries` (a page of it) and :func:`attempts`.

What the application's own pages show a customer: the deliveries of the
customer's endpoints, newest first, paged by an opaque cursor (``deliveries``),
and one event's story at them (``attempts``, ``outbox show --json``'s
``deliveries`` list). Both read in the caller's transaction, under the
tenant guard (``as_tenant``) when given: an endpoint of another tenant is not
found, as an unknown name is, and another tenant's event has no story here.
Times are ``datetime`` objects (aware, UTC or the session's zone), whatever
loaders the connection has. The same rows, without the cursor, are the view
``outbox.delivery_log``, for joins with the application's own tables.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from outbox import history
from outbox.endpoints import _args, _store
from outbox.errors import EndpointNotFound
from outbox.sql import queries

Json = dict[str, Any]
_FINISHED = frozenset({"delivered", "dead", "discarded"})
_NEWEST = sys.maxsize
"""``before`` when none is given: above every id (a bigint)."""


class _Page(NamedTuple):
    """A page of the log, its arguments checked."""

    name: str | None
    as_tenant: str | None
    tenant: str | None
    event_id: Any
    state: str | None
    since: datetime | timedelta | None
    before: int | None
    limit: int


def _page(name: object, *, as_tenant: object, tenant: object, event_id: object,
          state: object, since: object, before: object, limit: object) -> _Page:
    """The arguments of :func:`deliveries`, checked before any SQL runs."""
    return _Page(None if name is None else _args.name(name), _args.guard(as_tenant),
                 _args.tenant(tenant), None if event_id is None else _args.event_id(event_id),
                 _args.state(state), _args.moment(since, "since"), _args.before(before),
                 _args.limit(limit))


def _reading(page: _Page) -> _store.Plan[list[Json]]:
    """The endpoints the page covers (under the guard), then the page."""
    endpoint_ids: list[int] | None = None
    if page.name is not None or page.as_tenant is not None:
        rows = yield queries["delivery_log_endpoints"], {"name": page.name,
                                                         "as_tenant": page.as_tenant}
        if not rows and page.name is not None:
            raise EndpointNotFound(page.name)
        endpoint_ids = [int(row["id"]) for row in rows]
    since = page.since
    if isinstance(since, timedelta):  # that long ago on the database clock
        since = yield from _store.moment(since)
    rows = yield queries["delivery_log"], {
        "endpoint_ids": endpoint_ids, "as_tenant": page.as_tenant, "tenant": page.tenant,
        "event_id": page.event_id, "state": page.state, "since": since,
        "before": _NEWEST if page.before is None else page.before, "limit": page.limit,
        "finished": page.state is None or page.state in _FINISHED,
        "unfinished": page.state is None or page.state not in _FINISHED}
    return [_row(row) for row in rows]


def _row(row: dict[str, Any]) -> Json:
    delivery_id = row.pop("id")
    return {**row, "cursor": _args.cursor_of(int(delivery_id))}


def deliveries(conn: Any, name: str | None = None, *, as_tenant: str | None = None,
               tenant: str | None = None, event_id: Any = None, state: str | None = None,
               since: datetime | timedelta | None = None, before: str | None = None,
               limit: int = 100) -> list[Json]:
    """The newest deliveries first, at most ``limit`` (1 to 1000), as dicts.

    Each has ``event_id``, ``endpoint``, ``tenant``, ``type``, ``key``,
    ``state``, ``attempts``, ``created_at``, ``next_attempt_at`` (None unless
    pending with a known time), ``delivered_at``, ``last_status``,
    ``last_error`` and ``cursor``: give a row's cursor as ``before`` for the
    page after it (pages neither skip nor repeat a row). ``name``: that live
    endpoint's deliveries only (EndpointNotFound for none); None: every
    endpoint's (every endpoint of ``as_tenant``'s, under the guard).
    ``tenant``: the events of that tenant only; ``event_id``, ``state``:
    that event's, that state's; ``since``: made at or after it (a datetime,
    naive meaning UTC, or a timedelta meaning that long ago).
    """
    return _store.run(conn, _reading(_page(
        name, as_tenant=as_tenant, tenant=tenant, event_id=event_id, state=state, since=since,
        before=before, limit=limit)))


async def adeliveries(conn: Any, name: str | None = None, *, as_tenant: str | None = None,
                      tenant: str | None = None, event_id: Any = None,
                      state: str | None = None, since: datetime | timedelta | None = None,
                      before: str | None = None, limit: int = 100) -> list[Json]:
    """The async twin of :func:`deliveries`."""
    return await _store.arun(conn, _reading(_page(
        name, as_tenant=as_tenant, tenant=tenant, event_id=event_id, state=state, since=since,
        before=before, limit=limit)))


def _story(event_id: object, as_tenant: object) -> _store.Plan[list[Json]]:
    """The event's deliveries and their attempts, under the guard (the arguments checked
    before any SQL runs)."""
    return _telling({"event_id": _args.event_id(event_id), "as_tenant": _args.guard(as_tenant)})


def _telling(params: dict[str, Any]) -> _store.Plan[list[Json]]:
    rows = yield queries["show_deliveries"], params
    if not rows:
        return []
    failed = yield queries["show_attempts"], {"delivery_ids": [r["id"] for r in rows]}
    told = history.stories([tuple(r.values()) for r in rows],
                           [tuple(r.values()) for r in failed])
    return history.delivery_dicts(told)


def attempts(conn: Any, event_id: Any, *, as_tenant: str | None = None) -> list[Json]:
    """The event's story at each endpoint: ``outbox show --json``'s ``deliveries`` list
    (its state, attempts, next attempt, last error and status, and every attempt made),
    times as datetimes. Under ``as_tenant``, only that tenant's endpoints; ``[]`` for an
    unknown event, or another tenant's."""
    return _store.run(conn, _story(event_id, as_tenant))


async def aattempts(conn: Any, event_id: Any, *, as_tenant: str | None = None) -> list[Json]:
    """The async twin of :func:`attempts`."""
    return await _store.arun(conn, _story(event_id, as_tenant))
