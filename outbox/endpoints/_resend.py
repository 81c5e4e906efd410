"""Sending again from the application: :func:`replay`, :func:`retry_dead`, :func:`send_test`.

What ``outbox replay`` and ``outbox dead retry --endpoint`` do, on the
application's connection and in its transaction (the statements are the
commands' own), and a test event for one endpoint: what a customer asks for
on a settings page ("send it again", "my endpoint is fixed", "send a test").
Under the tenant guard (``as_tenant``) the endpoint is found only among that
tenant's, and a replay by event ids finds only that tenant's events (another
tenant's reads as unknown). Nothing is sent before the transaction commits:
the dispatchers are woken then.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from outbox._event import Event, build_batch
from outbox._shared import tracecontext
from outbox.endpoints import _args, _store
from outbox.endpoints._checks import glob_to_like
from outbox.errors import (
    EndpointNotFound,
    EventsNotFound,
    InvalidEndpoint,
    InvalidEvent,
    PayloadTooLarge,
)
from outbox.retention import since_floor
from outbox.sql import queries


class _Replay(NamedTuple):
    """A replay's arguments, checked."""

    name: str
    since: datetime | timedelta | None
    until: datetime | timedelta | None
    event_ids: list[uuid.UUID] | None
    types: list[str]
    tenant: str | None
    as_tenant: str | None
    dry_run: bool


def _replay(name: object, *, since: object, until: object, event_ids: object, types: object,
            tenant: object, as_tenant: object, dry_run: object) -> _Replay:
    """The arguments of :func:`replay`, checked before any SQL runs."""
    chosen = _Replay(_args.name(name), _args.moment(since, "since"),
                     _args.moment(until, "until"), _args.event_ids(event_ids),
                     _args.types(types), _args.tenant(tenant), _args.guard(as_tenant),
                     _args.switch(dry_run, "dry_run"))
    if chosen.since is None and chosen.event_ids is None:
        raise InvalidEndpoint("or event_ids must be given: the events published since a "
                              "time, or those events", "since")
    if chosen.since is not None and chosen.event_ids is not None:
        raise InvalidEndpoint("and event_ids cannot both be given: one chooses the events",
                              "since")
    if chosen.until is not None and chosen.since is None:
        raise InvalidEndpoint("goes with since", "until")
    return chosen


def _at(moment: datetime | timedelta | None) -> _store.Plan[datetime | None]:
    """A moment as a time on the database clock (a timedelta: that long ago)."""
    if isinstance(moment, timedelta):
        return (yield from _store.moment(moment))
    return moment


def _endpoint(name: str, as_tenant: str | None) -> _store.Plan[int]:
    endpoint_id = yield from _store.find(name, as_tenant)
    if endpoint_id is None:
        raise EndpointNotFound(name)
    return endpoint_id


def _replaying(replay: _Replay) -> _store.Plan[int]:
    """``admin.replay``'s statements under the guard; the number replayed (or, dry, that
    would be)."""
    yield queries["admin_replay_lock"], {}
    endpoint_id = yield from _endpoint(replay.name, replay.as_tenant)
    since = yield from _at(replay.since)
    params: dict[str, Any] = {
        "endpoint_id": endpoint_id, "dry_run": replay.dry_run, "as_tenant": replay.as_tenant,
        "event_ids": replay.event_ids, "types": [glob_to_like(t) for t in replay.types] or None,
        "since": since, "until": (yield from _at(replay.until)), "tenant": replay.tenant,
        "since_id": since_floor(since) if since is not None else None}
    if replay.event_ids is not None:
        missing = yield queries["admin_missing_events"], params
        if missing:
            raise EventsNotFound([str(row["id"]) for row in missing])
    rows = yield queries["admin_replay"], params
    if rows[0]["enabled"] is None:  # removed between the lookup and the insert
        raise EndpointNotFound(replay.name)
    return int(rows[0]["fresh" if replay.dry_run else "inserted"])


def replay(conn: Any, name: str, *, since: datetime | timedelta | None = None,
           until: datetime | timedelta | None = None, event_ids: Sequence[Any] | None = None,
           types: Sequence[str] | None = None, tenant: str | None = None,
           as_tenant: str | None = None, dry_run: bool = False) -> int:
    """Deliver events again to one endpoint, as ``outbox replay`` does; returns how many.

    Give ``since`` (a datetime, naive meaning UTC, or a timedelta meaning
    that long ago: the events published since then, and before ``until``
    when given) or ``event_ids`` (each must exist, else EventsNotFound and
    nothing changes); ``types`` (glob patterns) and ``tenant`` narrow either.
    The endpoint's patterns are not consulted; an event already on its way
    there is skipped, and an endpoint of a tenant gets only that tenant's
    events. ``dry_run``: count, change nothing.
    """
    return _store.run(conn, _replaying(_replay(
        name, since=since, until=until, event_ids=event_ids, types=types, tenant=tenant,
        as_tenant=as_tenant, dry_run=dry_run)))


async def areplay(conn: Any, name: str, *, since: datetime | timedelta | None = None,
                  until: datetime | timedelta | None = None,
                  event_ids: Sequence[Any] | None = None, types: Sequence[str] | None = None,
                  tenant: str | None = None, as_tenant: str | None = None,
                  dry_run: bool = False) -> int:
    """The async twin of :func:`replay`."""
    return await _store.arun(conn, _replaying(_replay(
        name, since=since, until=until, event_ids=event_ids, types=types, tenant=tenant,
        as_tenant=as_tenant, dry_run=dry_run)))


def _retrying(name: object, event_ids: object, tenant: object,
              as_tenant: object) -> _store.Plan[int]:
    """``admin.retry_dead``'s statement for one endpoint, under the guard (the arguments
    checked before any SQL runs)."""
    return _retrying_dead(_args.name(name), _args.guard(as_tenant), {
        "dry_run": False, "event_ids": _args.event_ids(event_ids), "types": None,
        "since": None, "until": None, "tenant": _args.tenant(tenant)})


def _retrying_dead(name: str, as_tenant: str | None,
                   params: dict[str, Any]) -> _store.Plan[int]:
    endpoint_id = yield from _endpoint(name, as_tenant)
    rows = yield queries["admin_retry_dead"], {**params, "endpoint_id": endpoint_id}
    return int(rows[0]["retried"])


def retry_dead(conn: Any, name: str, *, event_ids: Sequence[Any] | None = None,
               tenant: str | None = None, as_tenant: str | None = None) -> int:
    """The endpoint's dead letters back to pending, attempts afresh, as ``outbox dead retry
    --endpoint`` does; returns how many. ``event_ids`` and ``tenant`` narrow them."""
    return _store.run(conn, _retrying(name, event_ids, tenant, as_tenant))


async def aretry_dead(conn: Any, name: str, *, event_ids: Sequence[Any] | None = None,
                      tenant: str | None = None, as_tenant: str | None = None) -> int:
    """The async twin of :func:`retry_dead`."""
    return await _store.arun(conn, _retrying(name, event_ids, tenant, as_tenant))


def _test_event(type: object, data: object) -> dict[str, Any]:
    """The test event's id, type, payload and trace context, checked as publish() checks
    an event, before any SQL runs."""
    try:
        batch = build_batch([Event(type, {} if data is None else data)],  # type: ignore[arg-type]
                            trace=tracecontext.current())
    except PayloadTooLarge as exc:
        raise InvalidEndpoint(f"is {exc.size} bytes serialized; the limit is {exc.limit} "
                              "bytes", "data") from None
    except InvalidEvent as exc:
        # publish()'s words for its arguments (event type, payload) become send_test's.
        text = str(exc)
        if text.startswith("event type "):
            raise InvalidEndpoint(text.removeprefix("event type "), "type") from None
        raise InvalidEndpoint(text.removeprefix("payload ").replace("payload[", "data["),
                              "data") from None
    return {"id": batch.ids[0], "type": batch.types[0], "payload": batch.payloads[0],
            "traceparent": batch.traceparents[0], "tracestate": batch.tracestates[0]}


def _testing(name: object, as_tenant: object, type: object,
             data: object) -> _store.Plan[uuid.UUID]:
    """The test event's statement, its arguments checked before any SQL runs."""
    return _sending(_args.name(name), _args.guard(as_tenant), _test_event(type, data))


def _sending(endpoint: str, guard: str | None,
             event: dict[str, Any]) -> _store.Plan[uuid.UUID]:
    endpoint_id = yield from _endpoint(endpoint, guard)
    rows = yield queries["endpoint_send_test"], {**event, "endpoint_id": endpoint_id}
    if not rows:  # removed between the lookup and the insert
        raise EndpointNotFound(endpoint)
    return uuid.UUID(event["id"])


def send_test(conn: Any, name: str, *, as_tenant: str | None = None, type: str = "outbox.test",
              data: Any = None) -> uuid.UUID:
    """Publish an event for that endpoint alone (its patterns aside, with its tenant);
    returns its id.

    ``type`` and ``data`` (the payload; None: ``{}``) are checked as publish()
    checks them. The event reaches no other endpoint, and is sent once the
    transaction commits (a disabled endpoint keeps it until it is enabled).
    """
    return _store.run(conn, _testing(name, as_tenant, type, data))


async def asend_test(conn: Any, name: str, *, as_tenant: str | None = None,
                     type: str = "outbox.test", data: Any = None) -> uuid.UUID:
    """The async twin of :func:`send_test`."""
    return await _store.arun(conn, _testing(name, as_tenant, type, data))
