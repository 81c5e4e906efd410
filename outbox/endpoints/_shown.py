"""An endpoint as ``endpoints list --json`` and ``outbox.endpoints.list`` show it.

Each option is shown as its row of the options table says: secrets only as
their kind (``whsec``, ``env:NAME``), header values never (they are often
credentials), URLs with their query values and user information masked.
"""

from __future__ import annotations

from typing import Any

from outbox._shared.urls import shown_url
from outbox.endpoints._options import OPTIONS, Option
from outbox.endpoints._spec import signing_label
from outbox.endpoints._store import StoredEndpoint

_FIRST = ("url", "events", "tenant", "secret")
"""What the endpoint is and whom it serves, right after its name; then the other options
in the table's order, then those shown by name only (header names)."""


def _order(option: Option) -> tuple[int, int]:
    if option.field in _FIRST:
        return 0, _FIRST.index(option.field)
    return (2 if option.shown == "names" else 1), 0


_SHOWN_ORDER = sorted(OPTIONS, key=_order)  # stable: the table's order within each part


def as_json(e: StoredEndpoint) -> dict[str, Any]:
    """Every option of an endpoint; the secret reduced to its kind, header values hidden."""
    c = e.columns
    doc: dict[str, Any] = {"name": c["name"]}
    for option in _SHOWN_ORDER:
        value = c[option.column]
        if option.shown == "masked url":
            # Query values may be tokens (?token=...): masked, as header values are.
            doc[option.field] = shown_url(value)
        elif option.shown == "kind":
            doc["signing"] = signing_label(value)
            doc["signing_previous_until"] = max(
                (str(p.get("expires_at")) for p in e.previous_secrets), default=None)
        elif option.shown == "names":
            # Header values are often credentials (Authorization): names only.
            doc[option.field] = dict.fromkeys(value, "(hidden)")
        else:
            # TLS options are paths on the dispatcher's filesystem; never read here.
            doc[option.field] = value
    return {**doc, "enabled": e.enabled, "disabled_reason": e.disabled_reason,
            "created_at": e.created_at.isoformat(), "updated_at": e.updated_at.isoformat()}
