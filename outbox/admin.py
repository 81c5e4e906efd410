"""What an operator does to a running outbox: look at it, retry dead letters, replay events.

These functions back ``outbox status``, ``outbox dead`` and ``outbox replay``
and can be called from Python with a psycopg connection. Each one runs as a
single atomic unit inside ``conn.transaction()``: committed at the end when
the connection had no transaction open, a savepoint of the caller's
transaction otherwise. Retries and replays send ``NOTIFY outbox_wakeup`` so
that dispatchers wake as soon as the change commits. Purging lives in
:mod:`outbox.retention` and is re-exported here (``purge``, ``apurge``,
``PurgeResult``) so that every operator action has one address.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
from psycopg.rows import tuple_row

from outbox._shared.pinned import pinned
from outbox._shared.times import rfc3339
from outbox._shared.tls_files import HEARTBEAT_PREFIX
from outbox.endpoints import check_patterns, glob_to_like
from outbox.errors import EndpointNotFound, EventsNotFound
from outbox.retention import PurgeResult, apurge, purge, since_floor
from outbox.sql import queries

DEFAULT_DEAD_LIMIT = 100
DEFAULT_EVENTS_LIMIT = 50
"""How many dead letters ``dead list`` shows when no --limit is given."""


@dataclass(frozen=True)
class EndpointStatus:
    """Deliveries of one live endpoint, by state."""

    name: str
    enabled: bool
    pending: int
    in_flight: int
    delivered: int
    dead: int
    oldest_pending_seconds: float
    """Age of the oldest pending delivery (by its created_at, database clock); 0 when none."""
    circuit: str
    """The circuit breaker, shared by the fleet: closed, open or half-open."""
    max_pending: int | None
    """The --max-pending bound on pending plus in-flight deliveries; None: no bound."""
    problem: str | None = None
    """Why its deliveries do not go out, when something stops them: a secret the running
    dispatchers cannot read, a circuit open since a time, a pause by 410 or an operator,
    a disable with drop."""
    discarded: int = 0
    """Deliveries discarded by the endpoint's policy that retention still keeps (not in
    ``status --json``, whose keys are fixed; ``outbox_dropped_total`` counts them all)."""
    tenant: str | None = None
    """The tenant the endpoint belongs to (None: none); the web view's tenant column and
    ``/?tenant=``, not in ``status --json``."""


@dataclass(frozen=True)
class KeyWaits:
    """Producers waiting to publish a key another open transaction has published."""

    waiting: int
    longest_wait_seconds: float
    oldest_holder_seconds: float
    """How long the oldest transaction they wait for has been open."""


@dataclass(frozen=True)
class Status:
    endpoints: list[EndpointStatus]
    unrouted: int
    """Events no endpoint subscribed to when they were published (and not replayed since)."""
    dispatchers: int = 0
    """Dispatchers alive: heartbeats seen in the last 30 s, or the look of a dispatcher
    serving many databases that vouches for this idle one (each process once); at least 1
    while the maintainer lease is held (an earlier release's dispatchers write no
    heartbeat)."""
    served_by: list[ServedBy] = field(default_factory=list)
    """The processes of :attr:`dispatchers` that said so, by host and pid."""


@dataclass(frozen=True, order=True)
class ServedBy:
    """A dispatcher process serving the database: where it runs."""

    host: str
    pid: int

    def __str__(self) -> str:
        return f"{self.host} (pid {self.pid})"


@dataclass(frozen=True)
class TenantBacklog:
    """One tenant's undelivered deliveries at one endpoint (``outbox status --tenants``)."""

    endpoint: str
    tenant: str
    pending: int
    in_flight: int
    oldest_pending_seconds: float


TENANTS_PER_ENDPOINT = 5
"""``status --tenants`` shows this many tenants per endpoint, the largest backlogs first."""


def tenant_backlogs(conn: psycopg.Connection[Any], *,
                    per_endpoint: int = TENANTS_PER_ENDPOINT,
                    endpoint: str | None = None) -> list[TenantBacklog]:
    """Per live endpoint (``endpoint``'s only, with it), the tenants with the largest
    backlogs (pending plus in flight)."""
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["admin_tenant_backlogs"],
                           {"per_endpoint": per_endpoint, "endpoint": endpoint}).fetchall()
    return [TenantBacklog(str(name), str(tenant), int(pending), int(in_flight),
                          round(float(oldest), 3))
            for name, tenant, pending, in_flight, oldest in rows]


HORIZON_MIN_AGE_XIDS = 10_000
"""``horizon`` names a holder this many transaction ids old (about as many writes, and so
dead versions, made behind it: the order at which claims were measured to slow)."""
HORIZON_MIN_SECONDS = 60.0
"""``horizon`` names a holder open this long, too, where this role may see how long."""


@dataclass(frozen=True)
class HorizonHolder:
    """The oldest snapshot or transaction keeping vacuum from removing dead deliveries."""

    source: str
    """``backend`` (a session of this database, or a walsender relaying a standby's
    feedback), ``slot`` (a replication slot) or ``prepared`` (a prepared transaction)."""
    pid: int | None
    """The session's pid (a slot's: its walsender's while one is connected)."""
    user: str | None
    """The role of the session, or the owner of the prepared transaction."""
    application_name: str | None
    name: str | None
    """The slot's name, or the prepared transaction's gid; None for a session."""
    age_xids: int
    """Transaction ids begun since its snapshot or transaction id (``age()``)."""
    held_seconds: float | None
    """How long its transaction has been open (or prepared); None where this role may not
    see it: another role's session, unless this role has pg_monitor (pg_read_all_stats)."""


def key_waits(conn: psycopg.Connection[Any]) -> KeyWaits:
    """Publishers queued behind an open transaction of the same key (docs/concepts.md)."""
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        waiting, longest, holder = _row(cur.execute(queries["admin_key_waits"]))
    return KeyWaits(int(waiting), round(float(longest), 3), round(float(holder), 3))


def horizon(conn: psycopg.Connection[Any], *, min_age_xids: int = HORIZON_MIN_AGE_XIDS,
            min_seconds: float = HORIZON_MIN_SECONDS) -> HorizonHolder | None:
    """Who holds back vacuum of the outbox tables (the ``horizon`` query), when it is old
    enough to matter: ``min_age_xids`` transaction ids, or open ``min_seconds``."""
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(queries["horizon"]).fetchone()
    if row is None:
        return None
    source, pid, user, application, name, _xid, age_xids, open_seconds = row
    held = None if open_seconds is None else round(float(open_seconds), 3)
    if age_xids < min_age_xids and (held is None or held < min_seconds):
        return None
    return HorizonHolder(source=source, pid=pid, user=user, application_name=application or None,
                         name=name, age_xids=int(age_xids), held_seconds=held)


@dataclass(frozen=True)
class DeadLetter:
    event_id: str
    endpoint: str
    endpoint_removed: bool
    type: str
    key: str | None
    attempts: int
    last_error: str | None
    last_status: int | None
    failed_at: datetime | None
    created_at: datetime | None = None  # when its event was published
    tenant: str | None = None  # its event's tenant
    delivery_id: int = 0
    """The dead delivery's own id: with ``failed_at``, where the next page starts."""

    @property
    def after(self) -> DeadPage:
        """The place after this one, for :func:`dead_letters`'s ``before``."""
        return DeadPage(self.failed_at, self.delivery_id)


@dataclass(frozen=True)
class DeadPage:
    """Where a page of dead letters starts: below this (failed_at, delivery id) in the
    listing's order, newest first; a dead letter without a failed_at is the oldest."""

    failed_at: datetime | None
    delivery_id: int


Moment = datetime | timedelta
"""A point in time: a timestamp (naive meaning UTC), or a timedelta meaning that long ago
on the database clock."""


@dataclass(frozen=True)
class EventFilter:
    """Which events a dead-letter command or a replay touches, beside its selector.

    ``types``: glob patterns over event types (as ``--events``; several are
    or-ed; empty: every type); ``since``/``until``: bounds on the event's
    publish time (its ``created_at``, the database clock), ``until`` exclusive;
    ``tenant``: the events of that tenant only.
    """

    types: Sequence[str] = ()
    since: Moment | None = None
    until: Moment | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        if self.types:
            check_patterns(list(self.types))


@dataclass(frozen=True)
class RetryResult:
    retried: int
    """Deliveries put back to pending (with ``dry_run``: that would be)."""
    disabled_endpoints: list[str]
    """Disabled endpoints that got retried deliveries: those wait until it is enabled."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Dead letters chosen but not retried, by endpoint: it was removed (no dispatcher
    serves a removed endpoint; replay their events to a live one instead)."""
    dropping_endpoints: list[str] = field(default_factory=list)
    """Endpoints disabled with ``--drop`` whose dead letters were chosen: none is retried
    there (nor counted), since what waits there is discarded."""


@dataclass(frozen=True)
class ReplayResult:
    replayed: int
    """New pending deliveries created (with ``dry_run``: that would be)."""
    skipped: int
    """Chosen events left alone: they already had a pending or in-flight delivery there."""
    rerouted: int
    """Of the replayed events, how many were unrouted until now."""
    endpoint_enabled: bool
    endpoint_dropping: bool = False
    """The endpoint is disabled with ``--drop``: nothing is replayed there (nor skipped)."""


def status(conn: psycopg.Connection[Any]) -> Status:
    """Per live endpoint: delivery counts by state and the oldest pending age; unrouted events."""
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["admin_status"]).fetchall()
        beating, maintained, problems, serving = _row(cur.execute(
            queries["admin_dispatchers"]))
    reported: dict[str, str] = json.loads(problems)
    endpoints = [
        EndpointStatus(name=name, enabled=enabled, pending=pending, in_flight=in_flight,
                       delivered=delivered, dead=dead,
                       oldest_pending_seconds=round(float(oldest), 3), circuit=circuit,
                       max_pending=bound,
                       problem=_DROPPING if dropping else _problem(
                           enabled, reason, circuit, opened, reported.get(name)),
                       discarded=int(discarded or 0), tenant=tenant)
        for (_, name, enabled, pending, in_flight, delivered, dead, oldest, circuit, bound,
             reason, opened, discarded, dropping, tenant) in rows
        if name is not None
    ]
    alive = max(int(beating), 1 if maintained else 0)
    return Status(endpoints=endpoints, unrouted=int(rows[0][0]) if rows else 0,
                  dispatchers=alive,
                  served_by=sorted(ServedBy(str(p["host"]), int(p["pid"]))
                                   for p in json.loads(serving)))


_DROPPING = ("disabled with --drop: what is published for it is discarded "
             "(`outbox endpoints enable` to receive again)")
"""What stops an endpoint disabled with ``--drop``, before anything else."""


def _problem(enabled: bool, reason: str | None, circuit: str, opened: datetime | None,
             reported: str | None) -> str | None:
    """One line on what stops an endpoint's deliveries, most pressing first."""
    if reported and reported.startswith(HEARTBEAT_PREFIX):
        return f"dispatchers cannot use its TLS files: {reported[len(HEARTBEAT_PREFIX):]}"
    if reported:
        return f"dispatchers cannot sign: {reported}"
    if not enabled:
        if reason and reason.startswith("410"):
            return f"paused by {reason}: `outbox endpoints enable` once the receiver is back"
        return f"paused: {reason or 'disabled'}"
    if circuit != "closed" and opened is not None:
        return f"circuit {circuit} since {rfc3339(opened, timespec='seconds')}"
    return None


def dead_letters(conn: psycopg.Connection[Any], *, endpoint: str | None = None,
                 limit: int = DEFAULT_DEAD_LIMIT,
                 where: EventFilter = EventFilter(),
                 failed_since: Moment | None = None,
                 before: DeadPage | None = None) -> list[DeadLetter]:
    """Dead deliveries, newest first, at most ``limit``.

    ``where`` bounds the events' publish time; ``failed_since`` the time the
    delivery was dead-lettered ("what died in the last hour"); ``before``
    starts after a previous page's last row (its :attr:`DeadLetter.after`): a
    keyset, so a page costs the same however deep it is.

    ``endpoint`` may name a removed endpoint too: a forced removal is exactly
    what leaves dead letters behind. A name no endpoint ever had raises
    :class:`~outbox.errors.EndpointNotFound`.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        params = {"endpoint": endpoint, "limit": limit, **_filter_params(cur, where),
                  "failed_since": _moment(cur, failed_since),
                  "before_at": before.failed_at if before else None,
                  "before_id": before.delivery_id if before else None}
        rows = cur.execute(queries["admin_dead_list"], params).fetchall()
        if not rows and endpoint is not None:
            known = cur.execute(queries["admin_endpoint_ever_existed"],
                                {"name": endpoint}).fetchone()
            if not known or not known[0]:
                raise EndpointNotFound(endpoint)
    return [DeadLetter(*row) for row in rows]


@dataclass(frozen=True)
class EventLine:
    """One event of :func:`events`: what it is, and where each endpoint's delivery stands."""

    event_id: str
    type: str
    key: str | None
    created_at: datetime
    deliveries: dict[str, str]  # endpoint name -> state of its latest delivery
    tenant: str | None = None


def events(conn: psycopg.Connection[Any], *, where: EventFilter = EventFilter(),
           key: str | None = None, limit: int = DEFAULT_EVENTS_LIMIT,
           event_ids: Sequence[uuid.UUID] | None = None) -> list[EventLine]:
    """Events newest first, at most ``limit``, narrowed as a replay is (``where``), to
    one ordering ``key`` and to ``event_ids``: how an operator finds an event without SQL."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        params = {"key": key, "limit": limit, **_filter_params(cur, where),
                  "event_ids": list(event_ids) if event_ids is not None else None}
        params["since_id"] = since_floor(params["since"]) if params["since"] else None
        rows = cur.execute(queries["admin_events_list"], params).fetchall()
    return [EventLine(*row) for row in rows]


def retry_dead(conn: psycopg.Connection[Any], *, event_ids: Sequence[uuid.UUID] | None = None,
               endpoint: str | None = None, everything: bool = False,
               where: EventFilter = EventFilter(), dry_run: bool = False) -> RetryResult:
    """Dead deliveries back to pending with attempts reset; give exactly one selector.

    ``event_ids``: the dead deliveries of these events, whatever their
    endpoint; ``endpoint``: every dead delivery of that live endpoint (an
    unknown or removed name raises :class:`~outbox.errors.EndpointNotFound`);
    both: those events' dead deliveries at that endpoint (the web view's
    retry button); ``everything``: all of them; ``where`` narrows any of them. Dead letters
    of removed endpoints are never retried, since no dispatcher serves a
    removed endpoint; they are counted in ``skipped``. ``dry_run``: count,
    change nothing.
    """
    _one_selector(event_ids, endpoint, everything)
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        endpoint_id = None
        if endpoint is not None:
            endpoint_id, _ = _live_endpoint(cur, endpoint)
        retried, eligible, disabled, skipped, dropping = _row(cur.execute(
            queries["admin_retry_dead"], {
            "endpoint_id": endpoint_id, "dry_run": dry_run,
            "event_ids": list(event_ids) if event_ids is not None else None,
            **_filter_params(cur, where)}))
    return RetryResult(retried=int(eligible if dry_run else retried),
                       disabled_endpoints=list(disabled),
                       skipped={str(name): int(n) for name, n in json.loads(skipped)},
                       dropping_endpoints=list(dropping))


def discard_dead(conn: psycopg.Connection[Any], *,
                 event_ids: Sequence[uuid.UUID] | None = None, endpoint: str | None = None,
                 everything: bool = False, where: EventFilter = EventFilter(),
                 dry_run: bool = False) -> int:
    """Delete dead deliveries on purpose, with their attempt history; give one selector.

    Chosen as :func:`retry_dead` chooses them (``event_ids`` with ``endpoint``
    too), except that ``endpoint`` may
    name a removed endpoint too (its dead letters are what a forced removal
    leaves). Returns how many were deleted (with ``dry_run``: would be).
    """
    _one_selector(event_ids, endpoint, everything)
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        if endpoint is not None:
            known = _row(cur.execute(queries["admin_endpoint_ever_existed"], {"name": endpoint}))
            if not known[0]:
                raise EndpointNotFound(endpoint)
        gone, chosen = _row(cur.execute(queries["admin_dead_discard"], {
            "endpoint": endpoint, "dry_run": dry_run,
            "event_ids": list(event_ids) if event_ids is not None else None,
            **_filter_params(cur, where)}))
    return int(chosen if dry_run else gone)


def replay(conn: psycopg.Connection[Any], endpoint: str, *,
           since: Moment | None = None, event_ids: Sequence[uuid.UUID] | None = None,
           until: Moment | None = None, types: Sequence[str] = (),
           tenant: str | None = None, dry_run: bool = False) -> ReplayResult:
    """Deliver events again to one live endpoint, whatever their type and past.

    Give ``since`` (a timestamp, naive meaning UTC; or a timedelta meaning that
    long ago on the database clock: events created at or after it, and before
    ``until`` when given) or ``event_ids`` (all must exist, else
    :class:`EventsNotFound` and nothing changes); ``types`` (glob patterns)
    and ``tenant`` narrow either. The endpoint's patterns are not consulted: replay is an
    explicit request. A disabled endpoint is allowed; its new deliveries wait
    until it is enabled (``endpoint_enabled`` says so). ``dry_run``: count,
    change nothing.
    """
    if (since is None) == (event_ids is None):
        raise ValueError("give exactly one of since or event_ids")
    if until is not None and since is None:
        raise ValueError("until goes with since")
    params: dict[str, Any] = {"since_id": None, "dry_run": dry_run, "as_tenant": None,
                              "event_ids": list(event_ids) if event_ids is not None else None}
    with conn.transaction(), pinned(conn), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(queries["admin_replay_lock"])
        params["endpoint_id"], _ = _live_endpoint(cur, endpoint)
        params.update(_filter_params(cur, EventFilter(types, since, until, tenant)))
        if since is not None:
            params["since_id"] = since_floor(params["since"])
        else:
            missing = cur.execute(queries["admin_missing_events"], params).fetchall()
            if missing:
                raise EventsNotFound([m[0] for m in missing])
        chosen, inserted, fresh, rerouted, enabled, _, dropping = _row(
            cur.execute(queries["admin_replay"], params))
        if enabled is None:  # removed between the lookup and the insert
            raise EndpointNotFound(endpoint)
    replayed = int(fresh if dry_run else inserted)
    return ReplayResult(replayed=replayed, skipped=0 if dropping else int(chosen) - replayed,
                        rerouted=int(rerouted), endpoint_enabled=bool(enabled),
                        endpoint_dropping=bool(dropping))


def _one_selector(event_ids: Sequence[uuid.UUID] | None, endpoint: str | None,
                  everything: bool) -> None:
    """Event ids, an endpoint, both (those events at that endpoint), or everything."""
    if everything == (event_ids is not None or endpoint is not None):
        raise ValueError("give exactly one selector: event_ids, endpoint, both, or "
                         "everything=True")


def _filter_params(cur: psycopg.Cursor[tuple[Any, ...]], where: EventFilter) -> dict[str, Any]:
    """The filter as query parameters: LIKE patterns, and both bounds on the database clock."""
    return {"types": [glob_to_like(t) for t in where.types] or None,
            "since": _moment(cur, where.since), "until": _moment(cur, where.until),
            "tenant": where.tenant}


def _moment(cur: psycopg.Cursor[tuple[Any, ...]], moment: Moment | None) -> datetime | None:
    if moment is None:
        return None
    if isinstance(moment, datetime):
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return cast(datetime, _one(cur.execute(queries["admin_moment"], {"at": None, "ago": moment})))


def _row(cur: psycopg.Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The one row of a query that always answers one (an aggregate)."""
    row = cur.fetchone()
    if row is None:  # pragma: no cover - aggregates always answer
        raise RuntimeError("query returned no row")
    return row


def _one(cur: psycopg.Cursor[tuple[Any, ...]]) -> Any:
    return _row(cur)[0]


def _live_endpoint(cur: psycopg.Cursor[tuple[Any, ...]], name: str) -> tuple[int, bool]:
    row = cur.execute(queries["admin_live_endpoint"], {"name": name}).fetchone()
    if row is None:
        raise EndpointNotFound(name)
    return int(row[0]), bool(row[1])

__all__ = [
    "DEFAULT_DEAD_LIMIT",
    "DEFAULT_EVENTS_LIMIT",
    "HORIZON_MIN_AGE_XIDS",
    "HORIZON_MIN_SECONDS",
    "DeadLetter",
    "DeadPage",
    "EndpointStatus",
    "EventFilter",
    "EventLine",
    "EventsNotFound",
    "HorizonHolder",
    "KeyWaits",
    "Moment",
    "PurgeResult",
    "ReplayResult",
    "RetryResult",
    "ServedBy",
    "Status",
    "apurge",
    "dead_letters",
    "discard_dead",
    "events",
    "horizon",
    "key_waits",
    "purge",
    "replay",
    "retry_dead",
    "status",
]
