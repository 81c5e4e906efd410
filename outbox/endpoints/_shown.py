"""An endpoint as ``endpoints list --json`` and ``outbox.endpoints.list`` show it.

Each option is shown as its row of the options table says: secrets only as
their kind (``whsec``, ``env:NAME``), header values never (they are often
credentials), URLs with their query values and user information masked. The
web view shows the same object to the viewer role, with null for what that
role may not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from outbox._shared.urls import shown_url
from outbox.endpoints._options import OPTIONS, Option
from outbox.endpoints._store import StoredEndpoint

_FIRST = ("url", "events", "tenant", "description", "secret")
"""What the endpoint is and whom it serves, right after its name; then the other options
in the table's order, then those shown by name only (header names)."""


def _order(option: Option) -> tuple[int, int]:
    if option.field in _FIRST:
        return 0, _FIRST.index(option.field)
    return (2 if option.shown == "names" else 1), 0


_SHOWN_ORDER = sorted(OPTIONS, key=_order)  # stable: the table's order within each part
_STATE = ("enabled", "disabled_reason", "disabled_by", "dropping", "guarded", "created_at",
          "updated_at")
"""The columns of an endpoint's state that follow its options."""


def as_json(e: StoredEndpoint) -> dict[str, Any]:
    """Every option of an endpoint; the secret reduced to its kind, header values hidden."""
    state = {"enabled": e.enabled, "disabled_reason": e.disabled_reason,
             "disabled_by": e.disabled_by, "dropping": e.dropping, "guarded": e.guarded,
             "created_at": e.created_at, "updated_at": e.updated_at}
    until = e.signing_previous_until
    shown = {**e.columns, "secret": e.signing, "headers": e.header_names, **state}
    return _shaped(shown, until if until is None or isinstance(until, str) else
                   until.isoformat(), viewer=False)


def as_viewer_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`as_json`'s object from a row of the columns the viewer role may read
    (``VIEWER_COLUMNS`` and the state's): the other options null."""
    return _shaped(row, None, viewer=True)


def _shaped(row: Mapping[str, Any], rotation_ends: str | None, *,
            viewer: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": row["name"]}
    for option in _SHOWN_ORDER:
        value = None if viewer and not option.viewer else row[option.column]
        if option.shown == "kind":
            # A kind already (whsec, env:NAME): the secret itself is never read to show it.
            doc["signing"] = value
            doc["signing_previous_until"] = rotation_ends
        elif value is None:
            doc[option.field] = None
        elif option.shown == "masked url":
            # Query values may be tokens (?token=...): masked, as header values are.
            doc[option.field] = shown_url(value)
        elif option.shown == "names":
            # Header values are often credentials (Authorization): names only.
            doc[option.field] = dict.fromkeys(value, "(hidden)")
        else:
            # TLS options are paths on the dispatcher's filesystem; never read here.
            doc[option.field] = value
    doc.update({key: row.get(key) for key in _STATE})
    doc["created_at"] = doc["created_at"].isoformat()
    doc["updated_at"] = doc["updated_at"].isoformat()
    return doc
