"""Endpoint changes in the database: add, list, enable, disable, remove, rotate, sync.

Every function runs in the caller's transaction and never commits: the
``outbox endpoints`` command commits once at the end, so a command that
fails part-way (a name already taken, a removal refused) writes nothing.
Writers first take one advisory lock (``endpoints_admin_lock``) so that two
administrators cannot interleave; publish and the dispatcher only read
endpoints and never wait on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outbox.endpoints._spec import EndpointSpec
from outbox.endpoints._sync import SyncPlan, changed_options, plan_sync
from outbox.errors import EndpointBusy, EndpointExists, EndpointNotFound
from outbox.sql import queries

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class StoredEndpoint:
    """One live endpoint row, as ``endpoints list`` shows it and sync compares it."""

    id: int
    enabled: bool
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime
    columns: dict[str, Any]
    """Option columns, keyed and typed like :meth:`EndpointSpec.columns`."""
    previous_secrets: list[dict[str, Any]] = field(default_factory=list)

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


_OPTION_COLUMNS = ("name", "url", "events", "events_like", "secret", "max_attempts",
                   "timeout_seconds", "min_backoff_seconds", "max_backoff_seconds",
                   "max_in_flight", "rate_limit", "max_batch", "format", "headers",
                   "breaker_failures", "breaker_cooldown_seconds", "breaker_window_seconds",
                   "breaker_rate", "max_pending",
                   "max_pending_per_tenant", "send_tracestate", "ca_file", "client_cert",
                   "client_key")


def _lock(conn: Conn) -> None:
    conn.execute(queries["endpoints_admin_lock"])


def _params(spec: EndpointSpec) -> dict[str, Any]:
    params = spec.columns()
    params["headers"] = Jsonb(params["headers"])
    return params


def list_endpoints(conn: Conn) -> list[StoredEndpoint]:
    """Every live (not removed) endpoint, by name."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(queries["endpoints_live"]).fetchall()
    found = []
    for row in rows:
        columns = {key: row[key] for key in _OPTION_COLUMNS if key in row}
        columns["events"] = list(row["events"])
        columns["events_like"] = list(row["events_like"])
        found.append(StoredEndpoint(
            id=row["id"], enabled=row["enabled"], disabled_reason=row["disabled_reason"],
            created_at=row["created_at"], updated_at=row["updated_at"], columns=columns,
            previous_secrets=list(row["previous_secrets"] or [])))
    return found


def add_endpoint(conn: Conn, spec: EndpointSpec) -> int:
    """Insert a new endpoint; EndpointExists when a live one has the name."""
    _lock(conn)
    if conn.execute(queries["endpoint_id_by_name"], {"name": spec.name}).fetchone():
        raise EndpointExists(spec.name)
    try:
        row = conn.execute(queries["endpoint_insert"], _params(spec)).fetchone()
    except psycopg.errors.UniqueViolation as exc:  # added outside the lock, by hand
        raise EndpointExists(spec.name) from exc
    assert row is not None
    return int(row[0])


def set_enabled(conn: Conn, name: str, *, enabled: bool, reason: str | None = None) -> None:
    """Enable (clearing the disabled reason) or disable an endpoint by name."""
    _lock(conn)
    params = {"name": name, "enabled": enabled, "reason": None if enabled else reason}
    if not conn.execute(queries["endpoint_set_enabled"], params).fetchone():
        raise EndpointNotFound(name)


def remove_endpoint(conn: Conn, name: str, *, force: bool) -> int:
    """Soft-delete an endpoint; returns how many deliveries became dead letters.

    Refused with EndpointBusy while it has pending or in-flight deliveries,
    unless ``force``.
    """
    _lock(conn)
    row = conn.execute(queries["endpoint_id_by_name"], {"name": name}).fetchone()
    if row is None:
        raise EndpointNotFound(name)
    return _remove(conn, {name: int(row[0])}, force=force,
                   reason="the endpoint was removed (outbox endpoints remove)")[name]


def _remove(conn: Conn, ids: dict[str, int], *, force: bool, reason: str) -> dict[str, int]:
    """Remove endpoints by name -> id, all or none: the refusal is checked for all first."""
    if not ids:
        return {}
    rows = conn.execute(queries["endpoint_undelivered"], {"ids": list(ids.values())})
    by_id = {int(endpoint_id): int(count) for endpoint_id, count in rows.fetchall()}
    undelivered = {name: by_id.get(endpoint_id, 0) for name, endpoint_id in ids.items()}
    busy = {name: count for name, count in undelivered.items() if count}
    if busy and not force:
        raise EndpointBusy(busy)
    for name, endpoint_id in ids.items():
        if undelivered[name]:
            conn.execute(queries["endpoint_dead_letter_all"],
                         {"id": endpoint_id, "reason": f"endpoint {name}: {reason}"})
        conn.execute(queries["endpoint_mark_removed"], {"id": endpoint_id})
    return undelivered


class Rotation(NamedTuple):
    """What a rotation left signing besides the new secret."""

    retired_until: datetime | None
    """Until when the secret it replaced still signs (None: not kept, or there was none)."""
    signs_until: datetime | None
    """Until when any older secret still signs, earlier rotations' included (None: none)."""


def rotate_secret(conn: Conn, name: str, secret: str, overlap: timedelta) -> Rotation:
    """Install ``secret``; says until when the retired and any older secrets still sign.

    ``secret`` must already be checked (``whsec_...`` or ``env:NAME``).
    Entries of earlier rotations whose overlap has ended are pruned.
    """
    _lock(conn)
    params = {"name": name, "secret": secret, "overlap": overlap.total_seconds()}
    row = conn.execute(queries["endpoint_rotate_secret"], params).fetchone()
    if row is None:
        raise EndpointNotFound(name)
    return Rotation(retired_until=row[2], signs_until=row[1])


def sync_endpoints(conn: Conn, specs: Sequence[EndpointSpec], *, force: bool) -> SyncReport:
    """Make the live endpoints exactly ``specs``: add, replace, remove, all or nothing.

    Endpoints missing from ``specs`` are removed under the rule of
    :func:`remove_endpoint`; one busy endpoint without ``force`` refuses the
    whole sync before anything is written.
    """
    _lock(conn)
    stored = list_endpoints(conn)
    plan: SyncPlan = plan_sync(stored, specs)
    ids = {s.name: s.id for s in stored}
    removed = _remove(conn, {name: ids[name] for name in plan.remove}, force=force,
                      reason="the endpoint was removed (missing from the sync file)")
    for spec in plan.add:
        conn.execute(queries["endpoint_insert"], _params(spec))
    for spec in _specs_named(specs, plan.change):
        conn.execute(queries["endpoint_replace"], {**_params(spec), "id": ids[spec.name]})
    return SyncReport(added=[s.name for s in plan.add], changed=dict(plan.change),
                      removed=removed, unchanged=list(plan.unchanged))


def _specs_named(specs: Iterable[EndpointSpec], names: Iterable[str]) -> list[EndpointSpec]:
    wanted = set(names)
    return [spec for spec in specs if spec.name in wanted]


def plan_endpoints_sync(conn: Conn, specs: Sequence[EndpointSpec]) -> SyncReport:
    """What :func:`sync_endpoints` would do, writing nothing (``sync --dry-run``).

    ``removed`` gives, per endpoint to remove, its undelivered deliveries:
    what a removal refuses without ``force`` and dead-letters with it.
    """
    stored = list_endpoints(conn)
    plan: SyncPlan = plan_sync(stored, specs)
    ids = {s.name: s.id for s in stored if s.name in set(plan.remove)}
    undelivered: dict[int, int] = {}
    if ids:
        rows = conn.execute(queries["endpoint_undelivered"], {"ids": list(ids.values())})
        undelivered = {int(endpoint_id): int(n) for endpoint_id, n in rows.fetchall()}
    return SyncReport(added=[s.name for s in plan.add], changed=dict(plan.change),
                      removed={name: undelivered.get(ids[name], 0) for name in plan.remove},
                      unchanged=list(plan.unchanged))


# Option (EndpointSpec field) of each column that is one.
_FIELD_OF_COLUMN = {"url": "url", "events": "events", "secret": "secret",
                    "max_attempts": "max_attempts", "timeout_seconds": "timeout",
                    "min_backoff_seconds": "min_backoff", "max_backoff_seconds": "max_backoff",
                    "max_in_flight": "max_in_flight", "rate_limit": "rate_limit",
                    "max_batch": "max_batch", "format": "format", "headers": "headers",
                    "breaker_failures": "breaker_failures",
                    "breaker_cooldown_seconds": "breaker_cooldown",
                    "breaker_window_seconds": "breaker_window", "breaker_rate": "breaker_rate",
                    "max_pending": "max_pending",
                    "max_pending_per_tenant": "max_pending_per_tenant",
                    "send_tracestate": "send_tracestate", "ca_file": "ca_file",
                    "client_cert": "client_cert", "client_key": "client_key"}


def update_endpoint(conn: Conn, name: str, options: Mapping[str, object],
                    *, unset: Iterable[str] = ()) -> list[str]:
    """Change some options of a live endpoint in place; the others stay as they are.

    ``options`` are keyed like :meth:`EndpointSpec.from_options`; ``unset``
    names options to return to their default. The whole new definition is
    checked first. Returns the options that changed (none: nothing written).
    A new secret replaces the old one at once (``rotate-secret`` keeps both).
    """
    _lock(conn)
    current = _live(conn, name)
    merged = _options_of(current)
    for option in unset:
        merged.pop(option, None)
    merged.update(options)
    spec = EndpointSpec.from_options(name, merged)
    changed = changed_options(current.columns, spec.columns())
    if changed:
        conn.execute(queries["endpoint_replace"], {**_params(spec), "id": current.id})
    return changed


def spec_of(conn: Conn, name: str) -> EndpointSpec:
    """The live endpoint's definition as it is stored (in the caller's transaction)."""
    return EndpointSpec.from_options(name, _options_of(_live(conn, name)))


def _live(conn: Conn, name: str) -> StoredEndpoint:
    current = next((s for s in list_endpoints(conn) if s.name == name), None)
    if current is None:
        raise EndpointNotFound(name)
    return current


def _options_of(stored: StoredEndpoint) -> dict[str, object]:
    """A stored endpoint's options, keyed as EndpointSpec.from_options takes them."""
    return {_FIELD_OF_COLUMN[column]: value for column, value in stored.columns.items()
            if column in _FIELD_OF_COLUMN}
