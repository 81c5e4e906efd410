"""The endpoints as the dispatcher sees them, reloaded from the database every few seconds.

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
from typing import Any, cast

from dispatcher.policy.model import Endpoint, Format
from outbox.endpoints import decode_secret

log = logging.getLogger("dispatcher.endpoints")


def _keys(name: str, secret: str | None, previous_json: str, environ: Mapping[str, str],
          now: datetime) -> tuple[bytes, ...]:
    """Signing keys, newest first: the current secret, then those still in their overlap.

    The current secret must resolve (else ValueError: better wait than send
    unsigned); an old one that no longer resolves is only skipped, since the
    receiver already has the new one.
    """
    keys: list[bytes] = []
    if secret:
        keys.append(decode_secret(secret, environ))
    for old in json.loads(previous_json or "[]"):
        try:
            expires = datetime.fromisoformat(str(old.get("expires_at")))
            if expires.tzinfo is None:
                expires = expires.replace(tzinfo=UTC)
            if expires > now:
                keys.append(decode_secret(str(old["secret"]), environ))
        except (ValueError, KeyError) as exc:
            log.warning("endpoint %s: skipping a previous secret that cannot be used: %s",
                        name, exc)
    return tuple(keys)


class Registry:
    """Live endpoints by id; ``active()`` is the enabled ones the dispatcher may claim for."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.by_id: dict[int, Endpoint] = {}
        self._enabled: dict[int, bool] = {}
        self._broken: dict[int, str] = {}

    def load(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Replace the view with rows of the ``load_endpoints`` query.

        Each row carries the database's ``now()``: overlaps of rotated secrets end
        by the database clock, whatever this process's clock says.
        """
        by_id: dict[int, Endpoint] = {}
        enabled: dict[int, bool] = {}
        broken: dict[int, str] = {}
        for (ep_id, name, url, secret, previous, max_attempts, timeout, min_backoff,
             max_backoff, max_in_flight, rate_limit, max_batch, fmt, headers, is_on,
             breaker_failures, now) in rows:
            try:
                keys = _keys(name, secret, previous, self._environ, now)
            except (ValueError, KeyError) as exc:
                broken[ep_id] = str(exc)
                if self._broken.get(ep_id) != str(exc):
                    log.error("endpoint %s cannot sign its requests, its deliveries wait: %s",
                              name, exc)
                keys = ()
            by_id[ep_id] = Endpoint(
                id=ep_id, name=name, url=url, keys=keys, max_attempts=max_attempts,
                timeout=float(timeout), min_backoff=float(min_backoff),
                max_backoff=float(max_backoff), max_in_flight=max_in_flight,
                rate_limit=float(rate_limit) if rate_limit is not None else None,
                max_batch=max_batch, format=cast(Format, fmt),
                headers=json.loads(headers or "{}"), breaker_failures=breaker_failures)
            enabled[ep_id] = bool(is_on)
        self.by_id, self._enabled, self._broken = by_id, enabled, broken

    def active(self) -> list[Endpoint]:
        return [ep for ep_id, ep in self.by_id.items()
                if self._enabled.get(ep_id) and ep_id not in self._broken]

    def names(self) -> list[str]:
        return [ep.name for ep in self.by_id.values()]

    def describe(self, endpoint_id: int) -> str:
        """The endpoint's name, for logs (its id when it is no longer loaded)."""
        endpoint = self.by_id.get(endpoint_id)
        return endpoint.name if endpoint is not None else f"#{endpoint_id}"

    def longest_timeout(self) -> float:
        """The longest request timeout of any live endpoint (leases must outlast it)."""
        return max((ep.timeout for ep in self.by_id.values()), default=0.0)
