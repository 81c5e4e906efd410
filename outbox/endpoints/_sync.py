"""``outbox endpoints sync``: read the TOML file, and work out what to add, change, remove.

Both halves are pure: the file becomes a list of checked
:class:`~outbox.endpoints.EndpointSpec` (any problem is an InvalidEndpoint
naming the file and the key), and :func:`plan_sync` compares them with the
stored rows. ``outbox.endpoints._store.sync_endpoints`` carries the plan out.

The file::

    [endpoints.workflow]
    url = "https://workflow.internal/api/events"
    events = ["mail.*", "order.created"]
    secret = "env:OUTBOX_SECRET_WORKFLOW"
    max_attempts = 12
    headers = { authorization = "Bearer ..." }

An empty ``endpoints = {}`` removes every endpoint; a file without an
``endpoints`` table at all is refused, as that is more likely a wrong file.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outbox.endpoints._options import OPTIONS
from outbox.endpoints._spec import EndpointSpec
from outbox.errors import InvalidEndpoint

if TYPE_CHECKING:
    from outbox.endpoints._store import StoredEndpoint

@dataclass(frozen=True, slots=True)
class SyncPlan:
    """The difference between the stored endpoints and the file."""

    add: list[EndpointSpec] = field(default_factory=list)
    change: dict[str, list[str]] = field(default_factory=dict)  # name -> changed options
    remove: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


MAX_SYNC_FILE = 4 * 2**20
"""Bytes a sync file may hold: thousands of endpoints fit in a fraction of it."""


def load_sync_file(path: str | Path) -> list[EndpointSpec]:
    """The endpoints a sync file defines, checked; InvalidEndpoint for any problem."""
    try:
        # Refused before opening: a device (/dev/zero) would be read until memory
        # runs out, a named pipe would block the open; no sync file needs to be large.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise InvalidEndpoint(f"{path} is not a regular file")
        with open(path, "rb") as handle:
            text = handle.read(MAX_SYNC_FILE + 1)
        if len(text) > MAX_SYNC_FILE:
            raise InvalidEndpoint(f"{path} is larger than {MAX_SYNC_FILE // 2**20} MiB: "
                                  "not a sync file")
        document = tomllib.loads(text.decode("utf-8"))
    except OSError as exc:
        raise InvalidEndpoint(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidEndpoint(f"{path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:  # tomllib decodes before it parses
        raise InvalidEndpoint(f"{path} is not valid TOML: not UTF-8 text") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise InvalidEndpoint(f"{path} nests arrays or tables too deeply to be read") from None
    return specs_from_document(document, str(path))


def specs_from_document(document: Mapping[str, Any], source: str) -> list[EndpointSpec]:
    """Specs from an already parsed sync document; ``source`` prefixes every message."""
    for key in document:
        if key != "endpoints":
            raise InvalidEndpoint(
                f"{source}: unknown key {key!r}; write endpoints as [endpoints.NAME] tables")
    if "endpoints" not in document:
        raise InvalidEndpoint(
            f"{source}: no [endpoints.NAME] tables; to remove every endpoint, "
            "write `endpoints = {}`")
    tables = document["endpoints"]
    if not isinstance(tables, Mapping):
        raise InvalidEndpoint(f"{source}: endpoints must be a table of [endpoints.NAME] tables")
    specs = []
    for name, options in tables.items():
        if not isinstance(options, Mapping):
            raise InvalidEndpoint(
                f"{source}: endpoints.{name} must be a table ([endpoints.{name}])")
        try:
            specs.append(EndpointSpec.from_options(name, options))
        except InvalidEndpoint as exc:
            if exc.field is None or exc.field == "name":
                raise InvalidEndpoint(f"{source}: endpoints.{name}: {exc}") from None
            raise InvalidEndpoint(
                f"{source}: endpoints.{name}.{exc.field} {exc.problem}") from None
    return specs


def plan_sync(stored: Sequence[StoredEndpoint], specs: Sequence[EndpointSpec]) -> SyncPlan:
    """What to do so that the live endpoints become exactly ``specs``."""
    plan = SyncPlan()
    by_name = {s.name: s for s in stored}
    for spec in specs:
        current = by_name.get(spec.name)
        if current is None:
            plan.add.append(spec)
            continue
        changed = changed_options(current.columns, spec.columns())
        if changed:
            plan.change[spec.name] = changed
        else:
            plan.unchanged.append(spec.name)
    wanted = {spec.name for spec in specs}
    plan.remove.extend(s.name for s in stored if s.name not in wanted)
    return plan


def changed_options(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """The options whose stored value differs from the wanted one (events_like counts as
    events), in the table's order."""
    return [option.field for option in OPTIONS
            if any(stored.get(column) != wanted.get(column) for column in option.columns)]
