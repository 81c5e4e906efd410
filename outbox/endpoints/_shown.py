"""An endpoint as ``endpoints list --json`` and ``outbox.endpoints.list`` show it.

Secrets are shown only as their kind (``whsec``, ``env:NAME``), header
values never (they are often credentials), URLs with their query values
and user information masked.
"""

from __future__ import annotations

from typing import Any

from outbox._shared.urls import shown_url
from outbox.endpoints._spec import signing_label
from outbox.endpoints._store import StoredEndpoint


def as_json(e: StoredEndpoint) -> dict[str, Any]:
    """Every option of an endpoint; the secret reduced to its kind, header values hidden."""
    c = e.columns
    rotation_ends = max((str(p.get("expires_at")) for p in e.previous_secrets), default=None)
    return {
        # Query values may be tokens (?token=...): masked, as header values are.
        "name": c["name"], "url": shown_url(c["url"]), "events": c["events"],
        "tenant": c["tenant"],
        "signing": signing_label(c["secret"]), "signing_previous_until": rotation_ends,
        "max_attempts": c["max_attempts"], "timeout": c["timeout_seconds"],
        "min_backoff": c["min_backoff_seconds"], "max_backoff": c["max_backoff_seconds"],
        "max_in_flight": c["max_in_flight"], "rate_limit": c["rate_limit"],
        "max_batch": c["max_batch"], "format": c["format"],
        "breaker_failures": c["breaker_failures"],
        "breaker_cooldown": c["breaker_cooldown_seconds"],
        "breaker_window": c["breaker_window_seconds"], "breaker_rate": c["breaker_rate"],
        "max_pending": c["max_pending"], "max_pending_per_tenant": c["max_pending_per_tenant"],
        "send_tracestate": c["send_tracestate"],
        # Paths on the dispatcher's filesystem; the files themselves are never read here.
        "ca_file": c["ca_file"], "client_cert": c["client_cert"], "client_key": c["client_key"],
        # Header values are often credentials (Authorization): names only.
        "headers": dict.fromkeys(c["headers"], "(hidden)"),
        "enabled": e.enabled, "disabled_reason": e.disabled_reason,
        "created_at": e.created_at.isoformat(), "updated_at": e.updated_at.isoformat(),
    }
