"""The endpoints as the dispatcher sees them, kept up to date from the database.

Secrets are resolved here, once per load: ``whsec_...`` decoded, ``env:NAME``
looked up in the environment snapshot of the config (which holds none of
the configuration's own variables). An endpoint whose secret cannot be
resolved, a name missing from that snapshot included, is left out (its
deliveries wait, nothing goes out unsigned) and the problem is logged once
per change, without the secret.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

from dispatcher.policy.model import Endpoint, TlsFiles
from outbox._shared.endpoint_defaults import Format
from outbox._shared.secrets import decode_secret
from outbox._shared.tls_files import HEARTBEAT_PREFIX

log = logging.getLogger("dispatcher.endpoints")


class _Earlier(NamedTuple):
    """A rotated secret still in its overlap: until when it signs, and its text."""

    expires: datetime
    secret: str


def _earlier(name: str, previous_json: str, now: datetime) -> list[_Earlier]:
    """The rotated secrets of ``previous_secrets`` still in their overlap at ``now``, read
    once per load; an entry that cannot be read is skipped, saying so."""
    earlier = []
    for old in json.loads(previous_json or "[]"):
        try:
            expires = datetime.fromisoformat(str(old.get("expires_at")))
            expires = expires if expires.tzinfo else expires.replace(tzinfo=UTC)
            if expires > now:
                earlier.append(_Earlier(expires, str(old["secret"])))
        except (ValueError, KeyError) as exc:
            log.warning("endpoint %s: skipping a previous secret that cannot be used: %s",
                        name, exc)
    return earlier


def _keys(name: str, secret: str | None, earlier: Sequence[_Earlier],
          environ: Mapping[str, str]) -> tuple[bytes, ...]:
    """Signing keys, newest first: the current secret, then those still in their overlap.

    The current secret must resolve (else ValueError: better wait than send
    unsigned); an old one that no longer resolves is only skipped, since the
    receiver already has the new one.
    """
    keys: list[bytes] = []
    if secret:
        keys.append(decode_secret(secret, environ))
    for old in earlier:
        try:
            keys.append(decode_secret(old.secret, environ))
        except (ValueError, KeyError) as exc:
            log.warning("endpoint %s: skipping a previous secret that cannot be used: %s",
                        name, exc)
    return tuple(keys)


class EndpointRow(NamedTuple):
    """One row of ``load_endpoints`` (dispatch.sql), its columns by name and in order."""

    id: int
    name: str
    url: str
    secret: str | None
    previous_secrets: str
    max_attempts: int
    timeout_seconds: float
    min_backoff_seconds: float
    max_backoff_seconds: float
    max_in_flight: int
    rate_limit: float | None
    max_batch: int
    format: str
    headers: str
    enabled: bool
    breaker_failures: int
    breaker_window_seconds: float
    send_tracestate: bool
    ca_file: str | None
    client_cert: str | None
    client_key: str | None
    tenant: str | None  # the tenant it belongs to; None: every tenant's events go to it
    guarded: bool  # saved with its URL checked: the private-network guard applies always
    trace_context: bool  # False: neither traceparent nor tracestate goes out
    drops_oldest: bool  # --when-full drop-oldest, with a --max-pending to drop to
    dropping: bool  # disabled with --drop: what is made for it is discarded
    keep_dead_seconds: float | None  # --keep-dead; None: dead letters are kept
    now: datetime  # the database's clock, for rotated secrets' overlaps
    version: str  # the row's xmin


def _member(members: set[int], endpoint_id: int, belongs: bool) -> None:
    if belongs:
        members.add(endpoint_id)
    else:
        members.discard(endpoint_id)


def _tls_files(row: EndpointRow) -> TlsFiles | None:
    """The endpoint's own TLS files, None when it names none (the default trust)."""
    files = TlsFiles(row.ca_file, row.client_cert, row.client_key)
    return files if any(files) else None


class EndpointView:
    """Live endpoints by id; :meth:`usable` tells those the dispatcher may claim for.

    Kept up to date in steps (``Maintenance.refresh_endpoints``): a digest of
    the endpoints' row versions says whether anything changed; if so, the
    versions say which, and only those rows are read and resolved again. An
    endpoint is also read again when an overlap of its rotated secrets ends,
    so that the old secret stops signing on time.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.by_id: dict[int, Endpoint] = {}
        self._enabled: dict[int, bool] = {}
        self._broken: dict[int, str] = {}
        self._versions: dict[int, str] = {}
        self._renew: dict[int, datetime] = {}  # endpoint -> end of its next overlap
        self.digest: str | None = None
        self._longest_timeout = 0.0
        self._discarding: set[int] = set()  # drop-oldest or dropping: discard_over's ids
        self._keep_dead: set[int] = set()  # with --keep-dead: expire_dead's ids

    def current(self, digest: str, now: datetime) -> bool:
        """Nothing changed since the last update, and no overlap has ended since."""
        return digest == self.digest and not any(end <= now for end in self._renew.values())

    def stale(self, versions: Mapping[int, str], now: datetime) -> list[int]:
        """The endpoints to read again: new, changed, or at the end of an overlap."""
        return [ep_id for ep_id, version in versions.items()
                if self._versions.get(ep_id) != version
                or (ep_id in self._renew and self._renew[ep_id] <= now)]

    def update(self, digest: str, versions: Mapping[int, str],
               rows: Sequence[tuple[Any, ...]]) -> list[str]:
        """Apply rows of ``load_endpoints``; endpoints absent from ``versions`` are gone.

        Returns the names of endpoints not known before. Each row carries the
        database's ``now()``: overlaps of rotated secrets end by the database
        clock, whatever this process's clock says.
        """
        for ep_id in [ep_id for ep_id in self.by_id if ep_id not in versions]:
            self._forget(ep_id)
        added = []
        for raw in rows:
            row = EndpointRow._make(raw)
            if row.id not in self.by_id:
                added.append(row.name)
            self._load(row)
        self.digest = digest
        self._longest_timeout = max((ep.timeout for ep in self.by_id.values()), default=0.0)
        return added

    def _forget(self, ep_id: int) -> None:
        self.by_id.pop(ep_id, None)
        self._enabled.pop(ep_id, None)
        self._broken.pop(ep_id, None)
        self._versions.pop(ep_id, None)
        self._renew.pop(ep_id, None)
        self._discarding.discard(ep_id)
        self._keep_dead.discard(ep_id)

    def _load(self, row: EndpointRow) -> None:
        earlier = _earlier(row.name, row.previous_secrets, row.now)
        try:
            keys = _keys(row.name, row.secret, earlier, self._environ)
        except (ValueError, KeyError) as exc:
            if self._broken.get(row.id) != str(exc):
                log.error("endpoint %s cannot sign its requests, its deliveries wait: %s",
                          row.name, exc)
            self._broken[row.id] = str(exc)
            keys = ()
        else:
            self._broken.pop(row.id, None)
        self.by_id[row.id] = Endpoint(
            id=row.id, name=row.name, url=row.url, keys=keys, max_attempts=row.max_attempts,
            timeout=float(row.timeout_seconds), min_backoff=float(row.min_backoff_seconds),
            max_backoff=float(row.max_backoff_seconds), max_in_flight=row.max_in_flight,
            rate_limit=float(row.rate_limit) if row.rate_limit is not None else None,
            max_batch=row.max_batch, format=cast(Format, row.format),
            headers=json.loads(row.headers or "{}"), breaker_failures=row.breaker_failures,
            breaker_window=float(row.breaker_window_seconds),
            send_tracestate=bool(row.send_tracestate), tls=_tls_files(row), tenant=row.tenant,
            guarded=bool(row.guarded), trace_context=bool(row.trace_context))
        self._enabled[row.id] = bool(row.enabled)
        self._versions[row.id] = row.version
        _member(self._discarding, row.id, bool(row.drops_oldest or row.dropping))
        _member(self._keep_dead, row.id, row.keep_dead_seconds is not None)
        # Read again when the first overlap still running ends (its secret stops signing).
        renew = min((old.expires for old in earlier), default=None)
        if renew is None:
            self._renew.pop(row.id, None)
        else:
            self._renew[row.id] = renew

    def usable(self, endpoint_id: int) -> Endpoint | None:
        """The endpoint, if it is enabled and can sign: the claimer may claim for it."""
        if not self._enabled.get(endpoint_id) or endpoint_id in self._broken:
            return None
        return self.by_id.get(endpoint_id)

    def discarding(self) -> list[int]:
        """The endpoints whose policy discards pending deliveries (``--when-full drop-oldest``,
        ``disable --drop``), by id: none, and the maintainer runs no statement for them."""
        return sorted(self._discarding)

    def keeping_dead(self) -> list[int]:
        """The endpoints whose dead letters expire (``--keep-dead``), by id."""
        return sorted(self._keep_dead)

    def problems(self, tls: Mapping[TlsFiles, str] | None = None) -> dict[str, str]:
        """Endpoint name -> why this process cannot serve it: a secret it cannot use, else
        (``tls``: the problems of the TLS files sets this process last tried) its files."""
        found = {self.describe(ep_id): why for ep_id, why in sorted(self._broken.items())}
        if tls:
            for endpoint in self.by_id.values():
                why = tls.get(endpoint.tls) if endpoint.tls is not None else None
                if why is not None and endpoint.name not in found:
                    found[endpoint.name] = HEARTBEAT_PREFIX + why
        return found

    def describe(self, endpoint_id: int) -> str:
        """The endpoint's name, for logs (its id when it is no longer loaded)."""
        endpoint = self.by_id.get(endpoint_id)
        return endpoint.name if endpoint is not None else f"#{endpoint_id}"

    def longest_timeout(self) -> float:
        """The longest request timeout of any live endpoint (leases must outlast it)."""
        return self._longest_timeout
