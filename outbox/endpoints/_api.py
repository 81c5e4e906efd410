"""Endpoints managed from the application, in its own transaction: add, update, remove, ...

What ``outbox endpoints`` does, as functions over the caller's psycopg 3
connection (``aadd``, ``aupdate`` ... over an ``AsyncConnection``), so that
a change a customer makes in the application's own pages and the endpoint
change commit or roll back together. Nothing here commits or rolls back.

Each function is a thin shell: the pure core (:func:`_new`, :func:`_changes`,
:func:`_rotation`) checks the arguments and builds what the statements need
before any SQL runs, and the plans of ``_store`` (the ones the command runs)
do the rest; the sync shell runs them with ``_store.run``, the async one with
``_store.arun``. A refused call (``InvalidEndpoint``, ``EndpointExists``,
``EndpointNotFound``, ``EndpointBusy``) has written nothing. A secret is
never logged: a generated one is the return value of :func:`add` or
:func:`rotate_secret`, and nothing else sees it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from outbox._shared.secrets import check_secret
from outbox.durations import parse_duration
from outbox.endpoints import _store
from outbox.endpoints._checks import check_tenant
from outbox.endpoints._options import BY_FIELD
from outbox.endpoints._shown import as_json
from outbox.endpoints._spec import EndpointSpec, generate_secret
from outbox.errors import InvalidEndpoint

Json = dict[str, Any]

MAX_OVERLAP = timedelta(days=365)
"""The longest a rotated secret may keep signing beside the new one."""

_OPTIONS = frozenset(BY_FIELD)
DISABLED_REASON = "disabled by the application (outbox.endpoints.disable)"


def _new(name: str, options: dict[str, Any]) -> tuple[EndpointSpec, str]:
    """The checked definition of a new endpoint, and its secret (generated for None)."""
    if options["secret"] is None:
        options["secret"] = generate_secret()
    return EndpointSpec.from_options(name, options), str(options["secret"])


def _changes(options: dict[str, Any]) -> tuple[dict[str, Any], builtins.list[str]]:
    """``update``'s keywords as the options to set and those to return to their default
    (given as None); an unknown name is refused before any SQL runs."""
    for option in options:
        if option not in _OPTIONS:
            raise InvalidEndpoint(
                f"is not a known option; the options are {', '.join(sorted(_OPTIONS))}",
                option)
    # The values are checked with the stored ones (min_backoff against max_backoff, a
    # client_cert beside its key), before anything is written; a tenant before any SQL.
    check_tenant(options.get("tenant"))
    return ({k: v for k, v in options.items() if v is not None},
            [k for k, v in options.items() if v is None])


def _rotation(secret: str | None, overlap: str | float | timedelta) -> tuple[str, timedelta]:
    """The new secret (generated for None), checked, and the overlap as a duration."""
    secret = generate_secret() if secret is None else secret
    check_secret(secret)
    try:
        if isinstance(overlap, timedelta):
            span = overlap
        elif isinstance(overlap, int | float) and not isinstance(overlap, bool):
            span = timedelta(seconds=overlap)
        elif isinstance(overlap, str):
            span = parse_duration(overlap)
        else:
            raise ValueError(f"must be a duration such as '24h', not {overlap!r}")
    except (ValueError, OverflowError) as exc:
        raise InvalidEndpoint(str(exc), "overlap") from None
    if not timedelta(0) <= span <= MAX_OVERLAP:
        raise InvalidEndpoint("must be between 0 and 365d", "overlap")
    return secret, span


def add(conn: Any, name: str, *, url: str, events: Iterable[str] = ("*",),
        secret: str | None = None, tenant: str | None = None, **options: Any) -> str:
    """Add an endpoint; returns its signing secret: the one given, or a new ``whsec_`` one.

    ``options`` are named as the sync file's keys (``max_attempts=12``,
    ``timeout=30``, ``headers={...}``, ``max_pending=1000``). ``tenant``: the
    endpoint receives only that tenant's events. Raises InvalidEndpoint
    naming a bad option, EndpointExists for a name a live endpoint has.
    """
    spec, secret = _new(name, {**options, "url": url, "events": events, "secret": secret,
                               "tenant": tenant})
    _store.run(conn, _store.adding(spec))
    return secret


async def aadd(conn: Any, name: str, *, url: str, events: Iterable[str] = ("*",),
               secret: str | None = None, tenant: str | None = None, **options: Any) -> str:
    """The async twin of :func:`add`, on a psycopg ``AsyncConnection``."""
    spec, secret = _new(name, {**options, "url": url, "events": events, "secret": secret,
                               "tenant": tenant})
    await _store.arun(conn, _store.adding(spec))
    return secret


def update(conn: Any, name: str, **options: Any) -> builtins.list[str]:
    """Change some options of an endpoint; the others stay. Returns the options changed.

    An option given as None returns to its default (``tenant=None``: it belongs
    to no tenant any more, ``rate_limit=None``: no limit). A change of tenant
    applies to events published afterwards. The whole new definition is
    checked before anything is written.
    """
    given, unset = _changes(options)
    return _store.run(conn, _store.updating(name, given, unset=unset))


async def aupdate(conn: Any, name: str, **options: Any) -> builtins.list[str]:
    """The async twin of :func:`update`."""
    given, unset = _changes(options)
    return await _store.arun(conn, _store.updating(name, given, unset=unset))


def remove(conn: Any, name: str, *, force: bool = False) -> int:
    """Remove an endpoint; returns how many undelivered deliveries became dead letters.

    With undelivered deliveries and without ``force``: EndpointBusy, nothing changed.
    """
    return _store.run(conn, _store.removing(name, force=force))


async def aremove(conn: Any, name: str, *, force: bool = False) -> int:
    """The async twin of :func:`remove`."""
    return await _store.arun(conn, _store.removing(name, force=force))


def enable(conn: Any, name: str) -> None:
    """Resume deliveries to the endpoint (what waited while it was disabled goes out; after
    ``disable(..., drop=True)``, what is published from now on)."""
    _store.run(conn, _store.enabling(name, enabled=True))


async def aenable(conn: Any, name: str) -> None:
    """The async twin of :func:`enable`."""
    await _store.arun(conn, _store.enabling(name, enabled=True))


def disable(conn: Any, name: str, *, drop: bool = False) -> int:
    """Hold deliveries to the endpoint; what is published meanwhile waits for it.

    ``drop=True``: stop sending instead. Requests in flight finish; the
    endpoint's pending deliveries are discarded now (returns how many; 0 without
    ``drop``), and every delivery made for it until :func:`enable` is discarded
    by the dispatcher. A later plain ``disable`` makes it a pause again.
    """
    return _store.run(conn, _store.enabling(name, enabled=False, reason=_reason(drop),
                                            by="application", drop=drop))


async def adisable(conn: Any, name: str, *, drop: bool = False) -> int:
    """The async twin of :func:`disable`."""
    return await _store.arun(conn, _store.enabling(name, enabled=False, reason=_reason(drop),
                                                   by="application", drop=drop))


def _reason(drop: bool) -> str:
    """Why the endpoint is disabled, as its ``disabled_reason`` says; ``drop`` checked first."""
    if not isinstance(drop, bool):
        raise InvalidEndpoint(f"must be True or False, not {drop!r}", "drop")
    return DISABLED_REASON + (", dropping what is published for it" if drop else "")


def retry_now(conn: Any, name: str, *, tenant: str | None = None) -> int:
    """Make the endpoint's pending deliveries due now; returns how many were made due.

    For the moment a customer says their endpoint is fixed: deliveries waiting
    for a later attempt (a backoff, a ``Retry-After``) go at once, only
    ``tenant``'s with one, and a circuit that is open goes half-open, so that
    its next request is the probe. Deliveries parked behind an earlier one of
    their key stay parked (they follow it, in order) and are not counted. At a
    disabled endpoint they are made due too, and wait until it is enabled.
    """
    return _store.run(conn, _store.retrying(name, tenant=check_tenant(tenant))).due


async def aretry_now(conn: Any, name: str, *, tenant: str | None = None) -> int:
    """The async twin of :func:`retry_now`."""
    return (await _store.arun(conn, _store.retrying(name, tenant=check_tenant(tenant)))).due


def rotate_secret(conn: Any, name: str, *, secret: str | None = None,
                  overlap: str | float | timedelta = "24h") -> str:
    """Install a new signing secret (the one given, or a new one); returns it.

    The secret it replaces keeps signing too for ``overlap`` (a duration such
    as ``"24h"``, seconds, or a timedelta; at most 365 days), so that the
    receiver can move to the new one meanwhile.
    """
    secret, span = _rotation(secret, overlap)
    _store.run(conn, _store.rotating(name, secret, span))
    return secret


async def arotate_secret(conn: Any, name: str, *, secret: str | None = None,
                         overlap: str | float | timedelta = "24h") -> str:
    """The async twin of :func:`rotate_secret`."""
    secret, span = _rotation(secret, overlap)
    await _store.arun(conn, _store.rotating(name, secret, span))
    return secret


def get(conn: Any, name: str) -> Json:
    """The endpoint as ``endpoints list --json`` shows it (no secret, no header value)."""
    return as_json(_store.run(conn, _store.one(name)))


async def aget(conn: Any, name: str) -> Json:
    """The async twin of :func:`get`."""
    return as_json(await _store.arun(conn, _store.one(name)))


def list(conn: Any, *, tenant: str | None = None) -> builtins.list[Json]:
    """Every endpoint as ``endpoints list --json`` shows it, by name; with ``tenant``, that
    tenant's only."""
    return [as_json(e) for e in _store.run(conn, _store.listing(check_tenant(tenant)))]


async def alist(conn: Any, *, tenant: str | None = None) -> builtins.list[Json]:
    """The async twin of :func:`list`."""
    return [as_json(e) for e in await _store.arun(conn, _store.listing(check_tenant(tenant)))]
