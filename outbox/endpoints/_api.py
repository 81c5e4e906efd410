"""Endpoints managed from the application, in its own transaction: add, update, remove, ...

What ``outbox endpoints`` does, as functions over the caller's psycopg 3
connection (``aadd``, ``aupdate`` ... over an ``AsyncConnection``), so that
a change a customer makes in the application's own pages and the endpoint
change commit or roll back together. Nothing here commits or rolls back.

Each function is a thin shell: the pure core (:func:`_new`, :func:`_changes`,
:func:`_rotation` and the argument checks of ``_args``) checks the arguments
and builds what the statements need before any SQL runs, and the plans of
``_store`` (the ones the command runs) do the rest; the sync shell runs them
with ``_store.run``, the async one with ``_store.arun``. A refused call
(``InvalidEndpoint``, ``EndpointExists``, ``EndpointNotFound``,
``EndpointBusy``) has written nothing. A secret is never logged: a generated
one is the return value of :func:`add` or :func:`rotate_secret`, and nothing
else sees it.

``as_tenant=T`` is the tenant guard of a call made for tenant T: the
statements look endpoints up by name and tenant together, so that another
tenant's endpoint (or one of no tenant) is not found, exactly as an unknown
name is, and nothing changes. Messages name the functions' own arguments
(``force=True``, ``headers``), never a command-line flag: an application may
show them to its customers.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, NamedTuple

from outbox.durations import parse_duration
from outbox.endpoints import _args, _store, _url_guard
from outbox.endpoints._options import BY_FIELD
from outbox.endpoints._shown import as_json
from outbox.endpoints._spec import EndpointSpec, generate_secret
from outbox.errors import InvalidEndpoint

Json = dict[str, Any]

MAX_OVERLAP = timedelta(days=365)
"""The longest a rotated secret may keep signing beside the new one."""

_OPTIONS = frozenset(BY_FIELD)
DISABLED_REASON = "disabled by the application (outbox.endpoints.disable)"
REMOVED_REASON = "the endpoint was removed (outbox.endpoints.remove)"


class _New(NamedTuple):
    """What ``add`` inserts: the checked definition, its secret, whether it is guarded."""

    spec: EndpointSpec
    secret: str
    guarded: bool


def _new(name: str, options: dict[str, Any], *, as_tenant: object,
         allow_env_secret: object, check_url: object) -> _New:
    """The checked definition of a new endpoint, and its secret (generated for None)."""
    guard = _args.guard(as_tenant)
    options["tenant"] = _args.own_tenant(options["tenant"], guard)
    options["secret"] = _args.secret(options["secret"], allow_env=allow_env_secret)
    if _args.switch(check_url, "check_url"):
        _url_guard.check_url(options["url"])
    if options["secret"] is None:
        options["secret"] = generate_secret()
    return _New(EndpointSpec.from_options(name, options), str(options["secret"]),
                bool(check_url))


def _changes(name: str, options: dict[str, Any], *, as_tenant: object, allow_env_secret: object,
             check_url: object) -> _store.Plan[builtins.list[str]]:
    """``update``'s plan: its keywords as the options to set and those to return to their
    default (given as None); unknown names, a tenant under the guard, an ``env:`` secret
    not allowed and a URL that ``check_url`` refuses are refused before any SQL runs."""
    _args.name(name)
    guard = _args.guard(as_tenant)
    for option in options:
        if option not in _OPTIONS:
            raise InvalidEndpoint(
                f"is not a known option; the options are {', '.join(sorted(_OPTIONS))}",
                option)
    if guard is not None and "tenant" in options:
        raise InvalidEndpoint("cannot be changed under as_tenant: the endpoint stays that "
                              "tenant's", "tenant")
    # Each value alone before any SQL; with the stored ones (min_backoff against
    # max_backoff, a client_cert beside its key) once they are read, before any write.
    for field, value in options.items():
        if value is not None:
            BY_FIELD[field].clean(BY_FIELD[field].read(value))
    if "secret" in options:
        _args.secret(options["secret"], allow_env=allow_env_secret)
    else:
        _args.switch(allow_env_secret, "allow_env_secret")
    guarding = _args.switch(check_url, "check_url")
    if guarding and options.get("url") is not None:
        _url_guard.check_url(options["url"])
    return _store.updating(name, {k: v for k, v in options.items() if v is not None},
                           unset=[k for k, v in options.items() if v is None], as_tenant=guard,
                           url_check=_url_guard.check_url if guarding else None)


def _rotation(secret: str | None, overlap: str | float | timedelta, *,
              allow_env_secret: object) -> tuple[str, timedelta]:
    """The new secret (generated for None), checked, and the overlap as a duration."""
    secret = generate_secret() if secret is None else secret
    _args.secret(secret, allow_env=allow_env_secret)
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
        secret: str | None = None, tenant: str | None = None, as_tenant: str | None = None,
        allow_env_secret: bool = False, check_url: bool = False, **options: Any) -> str:
    """Add an endpoint; returns its signing secret: the one given, or a new ``whsec_`` one.

    ``options`` are named as the sync file's keys (``max_attempts=12``,
    ``timeout=30``, ``headers={...}``, ``max_pending=1000``). ``tenant``: the
    endpoint receives only that tenant's events. ``as_tenant``: the endpoint
    is that tenant's (any other ``tenant`` is refused). ``secret`` is a
    ``whsec_`` one (``env:NAME`` needs ``allow_env_secret=True``).
    ``check_url=True`` refuses an internal address first (:func:`check_url`)
    and saves the endpoint guarded. Raises InvalidEndpoint naming a bad
    option, EndpointExists for a name a live endpoint has (whoever's it is).
    """
    new = _new(name, {**options, "url": url, "events": events, "secret": secret,
                      "tenant": tenant}, as_tenant=as_tenant,
               allow_env_secret=allow_env_secret, check_url=check_url)
    _store.run(conn, _store.adding(new.spec, guarded=new.guarded))
    return new.secret


async def aadd(conn: Any, name: str, *, url: str, events: Iterable[str] = ("*",),
               secret: str | None = None, tenant: str | None = None,
               as_tenant: str | None = None, allow_env_secret: bool = False,
               check_url: bool = False, **options: Any) -> str:
    """The async twin of :func:`add`, on a psycopg ``AsyncConnection``."""
    new = _new(name, {**options, "url": url, "events": events, "secret": secret,
                      "tenant": tenant}, as_tenant=as_tenant,
               allow_env_secret=allow_env_secret, check_url=check_url)
    await _store.arun(conn, _store.adding(new.spec, guarded=new.guarded))
    return new.secret


def update(conn: Any, name: str, *, as_tenant: str | None = None,
           allow_env_secret: bool = False, check_url: bool = False,
           **options: Any) -> builtins.list[str]:
    """Change some options of an endpoint; the others stay. Returns the options changed.

    An option given as None returns to its default (``tenant=None``: it belongs
    to no tenant any more, ``rate_limit=None``: no limit). A change of tenant
    applies to events published afterwards; under ``as_tenant`` the tenant
    cannot change. ``check_url=True`` judges the endpoint's URL (the new one,
    or the one it has) as :func:`check_url` does and makes it guarded. The
    whole new definition is checked before anything is written.
    """
    return _store.run(conn, _changes(name, options, as_tenant=as_tenant,
                                     allow_env_secret=allow_env_secret, check_url=check_url))


async def aupdate(conn: Any, name: str, *, as_tenant: str | None = None,
                  allow_env_secret: bool = False, check_url: bool = False,
                  **options: Any) -> builtins.list[str]:
    """The async twin of :func:`update`."""
    return await _store.arun(conn, _changes(name, options, as_tenant=as_tenant,
                                            allow_env_secret=allow_env_secret,
                                            check_url=check_url))


def _removing(name: str, force: object, as_tenant: object) -> _store.Plan[int]:
    return _store.removing(_args.name(name), force=_args.switch(force, "force"),
                           reason=REMOVED_REASON, as_tenant=_args.guard(as_tenant))


def remove(conn: Any, name: str, *, force: bool = False, as_tenant: str | None = None) -> int:
    """Remove an endpoint; returns how many undelivered deliveries became dead letters.

    With undelivered deliveries and without ``force``: EndpointBusy, nothing changed.
    """
    return _store.run(conn, _removing(name, force, as_tenant))


async def aremove(conn: Any, name: str, *, force: bool = False,
                  as_tenant: str | None = None) -> int:
    """The async twin of :func:`remove`."""
    return await _store.arun(conn, _removing(name, force, as_tenant))


def _enabling(name: str, enabled: bool, as_tenant: object, *,
              drop: object = False) -> _store.Plan[int]:
    return _store.enabling(_args.name(name), enabled=enabled,
                           reason=None if enabled else _reason(drop), by="application",
                           drop=bool(drop), as_tenant=_args.guard(as_tenant))


def _reason(drop: object) -> str:
    """Why the endpoint is disabled, as its ``disabled_reason`` says; ``drop`` checked first."""
    if not isinstance(drop, bool):
        raise InvalidEndpoint(f"must be True or False, not {drop!r}", "drop")
    return DISABLED_REASON + (", dropping what is published for it" if drop else "")


def enable(conn: Any, name: str, *, as_tenant: str | None = None) -> None:
    """Resume deliveries to the endpoint (what waited while it was disabled goes out; after
    ``disable(..., drop=True)``, what is published from now on)."""
    _store.run(conn, _enabling(name, True, as_tenant))


async def aenable(conn: Any, name: str, *, as_tenant: str | None = None) -> None:
    """The async twin of :func:`enable`."""
    await _store.arun(conn, _enabling(name, True, as_tenant))


def disable(conn: Any, name: str, *, drop: bool = False, as_tenant: str | None = None) -> int:
    """Hold deliveries to the endpoint; what is published meanwhile waits for it.

    ``drop=True``: stop sending instead. Requests in flight finish; the
    endpoint's pending deliveries are discarded now (returns how many; 0 without
    ``drop``), and every delivery made for it until :func:`enable` is discarded
    by the dispatcher. A later plain ``disable`` makes it a pause again.
    """
    return _store.run(conn, _enabling(name, False, as_tenant, drop=drop))


async def adisable(conn: Any, name: str, *, drop: bool = False,
                   as_tenant: str | None = None) -> int:
    """The async twin of :func:`disable`."""
    return await _store.arun(conn, _enabling(name, False, as_tenant, drop=drop))


def _retrying(name: str, tenant: object, as_tenant: object) -> _store.Plan[_store.RetryNow]:
    return _store.retrying(_args.name(name), tenant=_args.tenant(tenant),
                           as_tenant=_args.guard(as_tenant))


def retry_now(conn: Any, name: str, *, tenant: str | None = None,
              as_tenant: str | None = None) -> int:
    """Make the endpoint's pending deliveries due now; returns how many were made due.

    For the moment a customer says their endpoint is fixed: deliveries waiting
    for a later attempt (a backoff, a ``Retry-After``) go at once, only
    ``tenant``'s with one, and a circuit that is open goes half-open, so that
    its next request is the probe. Deliveries parked behind an earlier one of
    their key stay parked (they follow it, in order) and are not counted. At a
    disabled endpoint they are made due too, and wait until it is enabled.
    """
    return _store.run(conn, _retrying(name, tenant, as_tenant)).due


async def aretry_now(conn: Any, name: str, *, tenant: str | None = None,
                     as_tenant: str | None = None) -> int:
    """The async twin of :func:`retry_now`."""
    return (await _store.arun(conn, _retrying(name, tenant, as_tenant))).due


def _rotating(name: str, secret: str, overlap: timedelta,
              as_tenant: object) -> _store.Plan[_store.Rotation]:
    return _store.rotating(_args.name(name), secret, overlap, as_tenant=_args.guard(as_tenant))


def rotate_secret(conn: Any, name: str, *, secret: str | None = None,
                  overlap: str | float | timedelta = "24h", as_tenant: str | None = None,
                  allow_env_secret: bool = False) -> str:
    """Install a new signing secret (the one given, or a new one); returns it.

    The secret it replaces keeps signing too for ``overlap`` (a duration such
    as ``"24h"``, seconds, or a timedelta; at most 365 days), so that the
    receiver can move to the new one meanwhile. ``secret`` is a ``whsec_``
    one (``env:NAME`` needs ``allow_env_secret=True``).
    """
    secret, span = _rotation(secret, overlap, allow_env_secret=allow_env_secret)
    _store.run(conn, _rotating(name, secret, span, as_tenant))
    return secret


async def arotate_secret(conn: Any, name: str, *, secret: str | None = None,
                         overlap: str | float | timedelta = "24h",
                         as_tenant: str | None = None, allow_env_secret: bool = False) -> str:
    """The async twin of :func:`rotate_secret`."""
    secret, span = _rotation(secret, overlap, allow_env_secret=allow_env_secret)
    await _store.arun(conn, _rotating(name, secret, span, as_tenant))
    return secret


def _one(name: str, as_tenant: object) -> _store.Plan[_store.StoredEndpoint]:
    return _store.one(_args.name(name), _args.guard(as_tenant))


def get(conn: Any, name: str, *, as_tenant: str | None = None) -> Json:
    """The endpoint as ``endpoints list --json`` shows it (no secret, no header value)."""
    return as_json(_store.run(conn, _one(name, as_tenant)))


async def aget(conn: Any, name: str, *, as_tenant: str | None = None) -> Json:
    """The async twin of :func:`get`."""
    return as_json(await _store.arun(conn, _one(name, as_tenant)))


def _listing(tenant: object, as_tenant: object) -> _store.Plan[builtins.list[
        _store.StoredEndpoint]]:
    return _store.listing(_args.tenant(tenant), as_tenant=_args.guard(as_tenant))


def list(conn: Any, *, tenant: str | None = None,
         as_tenant: str | None = None) -> builtins.list[Json]:
    """Every endpoint as ``endpoints list --json`` shows it, by name; with ``tenant``, that
    tenant's only (under ``as_tenant``, that tenant's only)."""
    return [as_json(e) for e in _store.run(conn, _listing(tenant, as_tenant))]


async def alist(conn: Any, *, tenant: str | None = None,
                as_tenant: str | None = None) -> builtins.list[Json]:
    """The async twin of :func:`list`."""
    return [as_json(e) for e in await _store.arun(conn, _listing(tenant, as_tenant))]
