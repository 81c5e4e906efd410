"""Endpoint changes in the database: add, list, enable, disable, remove, rotate, sync.

Every change is a plan: a generator that yields the statements to run and
receives their rows, and never touches a connection, so that the blocking
shell (:func:`run`, what the command and ``outbox.endpoints.add`` use) and
the async one (:func:`arun`, ``aadd`` ...) cannot drift apart, as publish's
shells do not. Every plan runs in the caller's transaction and never commits:
the ``outbox endpoints`` command commits once at the end, so a command that
fails part-way (a name already taken, a removal refused) writes nothing; a
refusal is always decided before the first write. Writers first take one
advisory lock (``endpoints_admin_lock``) so that two administrators cannot
interleave; publish and the dispatcher only read endpoints and never wait on it.

A plan that names an endpoint takes ``as_tenant``, the application's tenant
guard: the statement that finds the endpoint finds only that tenant's (an
endpoint of another tenant, or of none, is not found, as an unknown name is),
and locks it, so that what it changes is still that tenant's when it writes.
None (the operator's command) finds any.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outbox._shared.pinned import apinned, pinned
from outbox._shared.plain import acursor, cursor
from outbox.endpoints._options import OPTIONS, STORED_COLUMNS
from outbox.endpoints._spec import EndpointSpec, signing_label
from outbox.endpoints._sync import SyncPlan, changed_options, plan_sync
from outbox.errors import EndpointBusy, EndpointExists, EndpointNotFound
from outbox.sql import queries

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]
Row = dict[str, Any]
Step = tuple[str, dict[str, Any]]
T = TypeVar("T")
Plan = Generator[Step, list[Row], T]


@dataclass(frozen=True, slots=True)
class StoredEndpoint:
    """One live endpoint row, as ``endpoints list`` shows it and sync compares it.

    Read to be shown (``endpoints_live``), its ``columns`` hold every option but
    the secret and the headers, which are known only by ``signing`` (the
    secret's kind) and ``header_names``; read whole for a sync
    (``endpoints_full``), they hold those too.
    """

    id: int
    enabled: bool
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime
    columns: dict[str, Any]
    """Option columns, keyed and typed like :meth:`EndpointSpec.columns`."""
    previous_secrets: list[dict[str, Any]] = field(default_factory=list)
    signing: str | None = None
    """The secret's kind: ``whsec``, the ``env:NAME`` it names, or None (unsigned)."""
    signing_previous_until: datetime | str | None = None
    """Until when a secret it replaced by rotation still signs; None: none does."""
    header_names: list[str] = field(default_factory=list)
    guarded: bool = False
    """Saved with its URL checked: the private-network guard applies to it at connect."""
    dropping: bool = False
    """Disabled with ``drop``: what is made for it is discarded until it is enabled."""
    disabled_by: str | None = None
    """``operator``, ``application`` or ``gone`` (a 410) while disabled; None enabled."""

    @property
    def name(self) -> str:
        return str(self.columns["name"])


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What a sync did: names added, changed (with the options that changed), removed."""

    added: list[str]
    changed: dict[str, list[str]]
    removed: dict[str, int]  # name -> deliveries made dead letters by the removal
    unchanged: list[str]


def run(conn: Conn, plan: Plan[T]) -> T:
    """Carry out a plan on a psycopg connection, in its current transaction, on the pinned
    search_path (:mod:`outbox._shared.pinned`).

    Anything but a psycopg 3 ``Connection`` is a TypeError, before any statement. The
    statements run on a cursor of the plan's own (:mod:`outbox._shared.plain`: psycopg's
    loaders whatever the connection has), unprepared: the caller's connection may go
    through a transaction pooler, where a statement prepared in one transaction is missing
    in the next, and the optional filters (``%(x)s IS NULL OR ...``) are planned with
    their values, never as a generic plan that would read every row.
    """
    if not isinstance(conn, psycopg.Connection):
        raise TypeError(_not_a_connection(conn, "a psycopg 3 Connection"))
    with pinned(conn), cursor(conn, dict_row) as cur:
        try:
            step = next(plan)
            while True:
                cur.execute(step[0], step[1], prepare=False)
                rows = cur.fetchall() if cur.description is not None else []
                step = plan.send(rows)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def arun(conn: AsyncConn, plan: Plan[T]) -> T:
    """Carry out a plan on a psycopg AsyncConnection, as :func:`run` does."""
    if not isinstance(conn, psycopg.AsyncConnection):
        raise TypeError(_not_a_connection(conn, "a psycopg 3 AsyncConnection"))
    async with apinned(conn), acursor(conn, dict_row) as cur:
        try:
            step = next(plan)
            while True:
                await cur.execute(step[0], step[1], prepare=False)
                rows = await cur.fetchall() if cur.description is not None else []
                step = plan.send(rows)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def _not_a_connection(conn: object, wanted: str) -> str:
    """What a call was given instead of a connection, and where to find the right one."""
    if isinstance(conn, psycopg.AsyncConnection):
        hint = "; on an AsyncConnection call the a... twin (aadd, aget, ...)"
    elif isinstance(conn, psycopg.Connection):
        hint = "; on a Connection call the function without the a (add, get, ...)"
    elif hasattr(conn, "connection") and hasattr(conn, "ensure_connection"):
        hint = " (Django: connections[alias].connection, after ensure_connection())"
    else:
        hint = ""
    return f"conn must be {wanted}, not {type(conn).__name__}{hint}"


def moment(ago: timedelta) -> Plan[datetime]:
    """The time ``ago`` before now, on the database clock (as ``outbox`` reads "2h ago")."""
    rows = yield queries["admin_moment"], {"at": None, "ago": ago}
    return next(iter(rows[0].values()))  # type: ignore[no-any-return]


def _lock() -> Plan[None]:
    yield queries["endpoints_admin_lock"], {}


def _params(spec: EndpointSpec, *, guarded: bool = False) -> dict[str, Any]:
    """The spec as endpoint_insert's and endpoint_update's parameters; ``guarded``: saved
    with its URL checked (sticky: an update without it keeps what was)."""
    params = spec.columns()
    params["headers"] = Jsonb(params["headers"])
    params["guarded"] = guarded
    return params


def _stored(row: Row) -> StoredEndpoint:
    columns = {key: row[key] for key in STORED_COLUMNS if key in row}
    whole = "secret" in row
    previous = list(row["previous_secrets"] or []) if whole else []
    return StoredEndpoint(
        id=row["id"], enabled=row["enabled"], disabled_reason=row["disabled_reason"],
        created_at=row["created_at"], updated_at=row["updated_at"], columns=columns,
        previous_secrets=previous,
        signing=signing_label(row["secret"]) if whole else row["signing"],
        signing_previous_until=(max((str(p.get("expires_at")) for p in previous), default=None)
                                if whole else row["signing_previous_until"]),
        header_names=list(row["headers"] if whole else row["header_names"] or []),
        guarded=bool(row["guarded"]), dropping=bool(row["dropping"]),
        disabled_by=row["disabled_by"])


def listing(tenant: str | None = None, *,
            as_tenant: str | None = None) -> Plan[list[StoredEndpoint]]:
    """Every live (not removed) endpoint, by name; with ``tenant``, that tenant's only (and
    ``as_tenant``'s only, under the guard)."""
    rows = yield queries["endpoints_live"], {"name": None, "tenant": tenant,
                                             "as_tenant": as_tenant}
    return [_stored(row) for row in rows]


def list_endpoints(conn: Conn, *, tenant: str | None = None) -> list[StoredEndpoint]:
    """Every live (not removed) endpoint, by name; with ``tenant``, that tenant's only."""
    return run(conn, listing(tenant))


def adding(spec: EndpointSpec, *, guarded: bool = False) -> Plan[int]:
    """Insert a new endpoint; EndpointExists when a live one has the name, whoever's it is
    (names are one namespace). ``guarded``: its URL was checked (``check_url``)."""
    yield from _lock()
    if (yield from find(spec.name, None)) is not None:
        raise EndpointExists(spec.name)
    rows = yield queries["endpoint_insert"], _params(spec, guarded=guarded)
    return int(rows[0]["id"])


def find(name: str, as_tenant: str | None) -> Plan[int | None]:
    """The live endpoint's id, locked until the transaction ends (under the guard, only
    ``as_tenant``'s); None: no such endpoint."""
    rows = yield queries["endpoint_id_by_name"], {"name": name, "as_tenant": as_tenant}
    return int(rows[0]["id"]) if rows else None


def add_endpoint(conn: Conn, spec: EndpointSpec) -> int:
    """Insert a new endpoint; EndpointExists when a live one has the name."""
    try:
        return run(conn, adding(spec))
    except psycopg.errors.UniqueViolation as exc:  # added outside the lock, by hand
        raise EndpointExists(spec.name) from exc


def enabling(name: str, *, enabled: bool, reason: str | None = None, by: str = "operator",
             drop: bool = False, as_tenant: str | None = None) -> Plan[int]:
    """Enable an endpoint by name (clearing why, by whom and how it was disabled) or disable
    it (``by``: ``operator`` or ``application``); returns how many deliveries were discarded.

    ``drop`` (disabling): stop sending: its pending deliveries are discarded now, and the
    dispatchers discard whatever is made for it until it is enabled. Enabling an endpoint
    so disabled first discards what was made for it that they have not discarded yet, so
    that only what is published afterwards goes out. ``as_tenant``: that tenant's endpoint
    only (another is not found, and nothing changes).
    """
    yield from _lock()
    discarded = 0
    if enabled:
        discarded = yield from _discard_pending(name, as_tenant)
    params = {"name": name, "enabled": enabled, "reason": None if enabled else reason,
              "by": None if enabled else by, "drop": drop and not enabled,
              "as_tenant": as_tenant}
    if not (yield queries["endpoint_set_enabled"], params):
        raise EndpointNotFound(name)
    if drop and not enabled:
        discarded = yield from _discard_pending(name, as_tenant)
    return discarded


def _discard_pending(name: str, as_tenant: str | None = None) -> Plan[int]:
    """The pending deliveries of the endpoint, while it drops them, discarded; how many."""
    rows = yield queries["endpoint_discard_pending"], {"name": name, "as_tenant": as_tenant}
    return int(rows[0]["discarded"])


def set_enabled(conn: Conn, name: str, *, enabled: bool, reason: str | None = None,
                by: str = "operator", drop: bool = False) -> int:
    """Enable or disable an endpoint by name (see :func:`enabling`); the deliveries
    discarded."""
    return run(conn, enabling(name, enabled=enabled, reason=reason, by=by, drop=drop))


class RetryNow(NamedTuple):
    """What ``retry-now`` did (or, dry, would do) at one endpoint."""

    due: int
    """Pending deliveries made due now (those already due, or parked behind their key, not)."""
    enabled: bool
    """False: the endpoint is disabled, and they wait until it is enabled."""
    half_open: bool
    """An open circuit went (dry: would go) half-open: its next request is the probe."""


def retrying(name: str, *, tenant: str | None = None, dry_run: bool = False,
             as_tenant: str | None = None) -> Plan[RetryNow]:
    """Make the endpoint's pending deliveries (one tenant's with ``tenant``) due now, and
    an open circuit half-open at once; ``dry_run`` counts them and writes nothing."""
    if dry_run:
        rows = yield queries["endpoint_retry_count"], {"name": name, "tenant": tenant,
                                                       "as_tenant": as_tenant}
        if not rows:
            raise EndpointNotFound(name)
        return RetryNow(due=int(rows[0]["due"]), enabled=bool(rows[0]["enabled"]),
                        half_open=bool(rows[0]["half_open"]))
    yield from _lock()
    rows = yield queries["endpoint_retry_target"], {"name": name, "as_tenant": as_tenant}
    if not rows:
        raise EndpointNotFound(name)
    done = yield queries["endpoint_retry_now"], {"id": rows[0]["id"], "tenant": tenant}
    return RetryNow(due=int(done[0]["due"]), enabled=bool(rows[0]["enabled"]),
                    half_open=bool(done[0]["half_open"]))


def retry_endpoint_now(conn: Conn, name: str, *, tenant: str | None = None,
                       dry_run: bool = False) -> RetryNow:
    """Make the endpoint's pending deliveries due now (see :func:`retrying`)."""
    return run(conn, retrying(name, tenant=tenant, dry_run=dry_run))


def removing(name: str, *, force: bool,
             reason: str = "the endpoint was removed (outbox endpoints remove)",
             as_tenant: str | None = None) -> Plan[int]:
    """Soft-delete an endpoint; returns how many deliveries became dead letters.

    Refused with EndpointBusy while it has pending or in-flight deliveries,
    unless ``force``.
    """
    yield from _lock()
    endpoint_id = yield from find(name, as_tenant)
    if endpoint_id is None:
        raise EndpointNotFound(name)
    removed = yield from _remove({name: endpoint_id}, force=force, reason=reason)
    return removed[name]


def remove_endpoint(conn: Conn, name: str, *, force: bool) -> int:
    """Soft-delete an endpoint; returns how many deliveries became dead letters.

    Refused with EndpointBusy while it has pending or in-flight deliveries,
    unless ``force``.
    """
    return run(conn, removing(name, force=force))


def _undelivered(ids: Iterable[int]) -> Plan[dict[int, int]]:
    rows = yield queries["endpoint_undelivered"], {"ids": list(ids)}
    return {int(row["endpoint_id"]): int(row["count"]) for row in rows}


def _remove(ids: dict[str, int], *, force: bool, reason: str) -> Plan[dict[str, int]]:
    """Remove endpoints by name -> id, all or none: the refusal is checked for all first."""
    if not ids:
        return {}
    by_id = yield from _undelivered(ids.values())
    undelivered = {name: by_id.get(endpoint_id, 0) for name, endpoint_id in ids.items()}
    busy = {name: count for name, count in undelivered.items() if count}
    if busy and not force:
        raise EndpointBusy(busy)
    for name, endpoint_id in ids.items():
        if undelivered[name]:
            yield (queries["endpoint_dead_letter_all"],
                   {"id": endpoint_id, "reason": f"endpoint {name}: {reason}"})
        yield queries["endpoint_mark_removed"], {"id": endpoint_id}
    return undelivered


class Rotation(NamedTuple):
    """What a rotation left signing besides the new secret."""

    retired_until: datetime | None
    """Until when the secret it replaced still signs (None: not kept, or there was none)."""
    signs_until: datetime | None
    """Until when any older secret still signs, earlier rotations' included (None: none)."""


def rotating(name: str, secret: str, overlap: timedelta, *,
             as_tenant: str | None = None) -> Plan[Rotation]:
    """Install ``secret``; says until when the retired and any older secrets still sign.

    ``secret`` must already be checked (``whsec_...`` or ``env:NAME``).
    Entries of earlier rotations whose overlap has ended are pruned.
    """
    yield from _lock()
    params = {"name": name, "secret": secret, "overlap": overlap.total_seconds(),
              "as_tenant": as_tenant}
    rows = yield queries["endpoint_rotate_secret"], params
    if not rows:
        raise EndpointNotFound(name)
    return Rotation(retired_until=rows[0]["retired_until"],
                    signs_until=rows[0]["old_signs_until"])


def rotate_endpoint_secret(conn: Conn, name: str, secret: str, overlap: timedelta) -> Rotation:
    """Install ``secret``; says until when the retired and any older secrets still sign."""
    return run(conn, rotating(name, secret, overlap))


def sync_endpoints(conn: Conn, specs: Sequence[EndpointSpec], *, force: bool) -> SyncReport:
    """Make the live endpoints exactly ``specs``: add, replace, remove, all or nothing.

    Endpoints missing from ``specs`` are removed under the rule of
    :func:`remove_endpoint`; one busy endpoint without ``force`` refuses the
    whole sync before anything is written.
    """
    return run(conn, _syncing(specs, force=force))


def _whole() -> Plan[list[StoredEndpoint]]:
    """Every live endpoint with its secret and header values: what a sync compares."""
    rows = yield queries["endpoints_full"], {}
    return [_stored(row) for row in rows]


def _syncing(specs: Sequence[EndpointSpec], *, force: bool) -> Plan[SyncReport]:
    yield from _lock()
    stored = yield from _whole()
    plan: SyncPlan = plan_sync(stored, specs)
    ids = {s.name: s.id for s in stored}
    removed = yield from _remove({name: ids[name] for name in plan.remove}, force=force,
                                 reason="the endpoint was removed (missing from the sync file)")
    for spec in plan.add:
        yield queries["endpoint_insert"], _params(spec)
    secrets = {s.name: s.columns.get("secret") for s in stored}
    for spec in _specs_named(specs, plan.change):
        yield from _replacing(spec, ids[spec.name], secret_changed=secrets[spec.name]
                              != spec.secret)
    return SyncReport(added=[s.name for s in plan.add], changed=dict(plan.change),
                      removed=removed, unchanged=list(plan.unchanged))


def _replacing(spec: EndpointSpec, endpoint_id: int, *, secret_changed: bool) -> Plan[None]:
    """Write a sync file's whole definition over a stored endpoint: every option, the
    headers, and the secret when it changed (an unchanged one keeps its rotation)."""
    yield queries["endpoint_update"], {**_params(spec), "id": endpoint_id}
    yield queries["endpoint_set_headers"], {"headers": Jsonb(dict(spec.headers)),
                                            "id": endpoint_id}
    if secret_changed:
        yield queries["endpoint_set_secret"], {"secret": spec.secret, "id": endpoint_id}


def _specs_named(specs: Iterable[EndpointSpec], names: Iterable[str]) -> list[EndpointSpec]:
    wanted = set(names)
    return [spec for spec in specs if spec.name in wanted]


def plan_endpoints_sync(conn: Conn, specs: Sequence[EndpointSpec]) -> SyncReport:
    """What :func:`sync_endpoints` would do, writing nothing (``sync --dry-run``).

    ``removed`` gives, per endpoint to remove, its undelivered deliveries:
    what a removal refuses without ``force`` and dead-letters with it.
    """
    return run(conn, _planning(specs))


def _planning(specs: Sequence[EndpointSpec]) -> Plan[SyncReport]:
    stored = yield from _whole()
    plan: SyncPlan = plan_sync(stored, specs)
    ids = {s.name: s.id for s in stored if s.name in set(plan.remove)}
    undelivered = (yield from _undelivered(ids.values())) if ids else {}
    return SyncReport(added=[s.name for s in plan.add], changed=dict(plan.change),
                      removed={name: undelivered.get(ids[name], 0) for name in plan.remove},
                      unchanged=list(plan.unchanged))


_UNREAD = ("secret", "headers")
"""The options an update neither reads nor writes unless it is given them: a change of URL
needs no right to read a secret or a header value."""


def updating(name: str, options: Mapping[str, object], *, unset: Iterable[str] = (),
             as_tenant: str | None = None,
             url_check: Callable[[str], object] | None = None) -> Plan[list[str]]:
    """Change some options of a live endpoint in place; the others stay as they are.

    ``options`` are keyed like :meth:`EndpointSpec.from_options`; ``unset``
    names options to return to their default. The whole new definition is
    checked first. Returns the options that changed (none: nothing written).
    A new secret replaces the old one at once (``rotate-secret`` keeps both).
    The stored secret and headers are never read: given, they are written
    (and counted as changed); not given, they stay. ``url_check`` judges the
    endpoint's URL (the new one, or the stored one) before anything is written,
    and makes the endpoint guarded: saved with its URL checked.
    """
    yield from _lock()
    if (yield from find(name, as_tenant)) is None:  # locked: it stays as_tenant's
        raise EndpointNotFound(name)
    current = yield from _live(name, as_tenant)
    merged = _options_of(current)
    for option in unset:
        merged.pop(option, None)
    merged.update(options)
    spec = EndpointSpec.from_options(name, merged)
    if url_check is not None:
        url_check(spec.url)
    wanted = spec.columns()
    changed = [option for option in changed_options(current.columns, wanted)
               if option not in _UNREAD]
    changed += [option for option in _UNREAD if option in options or option in set(unset)]
    guarding = url_check is not None and not current.guarded
    if not changed and not guarding:
        return changed
    yield queries["endpoint_update"], {**_params(spec, guarded=url_check is not None),
                                       "id": current.id}
    if "secret" in changed:
        yield queries["endpoint_set_secret"], {"secret": wanted["secret"], "id": current.id}
    if "headers" in changed:
        yield queries["endpoint_set_headers"], {"headers": Jsonb(wanted["headers"]),
                                                "id": current.id}
    return [option.field for option in OPTIONS if option.field in changed]


def update_endpoint(conn: Conn, name: str, options: Mapping[str, object],
                    *, unset: Iterable[str] = ()) -> list[str]:
    """Change some options of a live endpoint in place (see :func:`updating`)."""
    return run(conn, updating(name, options, unset=unset))


def spec_of(conn: Conn, name: str) -> EndpointSpec:
    """The live endpoint's definition as it is stored (in the caller's transaction)."""
    return EndpointSpec.from_options(name, _options_of(run(conn, _live(name))))


def one(name: str, as_tenant: str | None = None) -> Plan[StoredEndpoint]:
    """The live endpoint of that name (under the guard, ``as_tenant``'s); EndpointNotFound
    for none."""
    return (yield from _live(name, as_tenant))


def _live(name: str, as_tenant: str | None = None) -> Plan[StoredEndpoint]:
    rows = yield queries["endpoints_live"], {"name": name, "tenant": None,
                                             "as_tenant": as_tenant}
    if not rows:
        raise EndpointNotFound(name)
    return _stored(rows[0])


def _options_of(stored: StoredEndpoint) -> dict[str, object]:
    """A stored endpoint's options, keyed as EndpointSpec.from_options takes them."""
    return {option.field: stored.columns[option.column] for option in OPTIONS
            if option.column in stored.columns}
