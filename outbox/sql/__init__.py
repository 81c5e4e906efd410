"""SQL text of the project, loaded once from the ``.sql`` files beside this module.

Every query lives in ``queries/*.sql`` as a named block::

    -- name: claim
    -- Why this query looks the way it does.
    WITH locked AS (...) UPDATE ...

and call sites read ``queries["claim"]``. Keeping SQL in files (rather than
f-strings spread over methods) lets a reader review every statement the project
runs in one place; nothing is ever formatted into this text at run time.

The names are a ``Literal`` type, :data:`QueryName`, so that mypy refuses a
misspelt name at a call site instead of a ``KeyError`` in production; loading
refuses files whose names differ from it, so the two cannot drift.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Literal, LiteralString, cast, get_args

QueryName = Literal[
    "admin_dead_list",
    "admin_endpoint_ever_existed",
    "admin_key_waits",
    "admin_live_endpoint",
    "admin_missing_events",
    "admin_replay",
    "admin_replay_lock",
    "admin_replay_since",
    "admin_retry_dead",
    "admin_status",
    "backlog",
    "bury_removed",
    "claim",
    "complete",
    "demo_dead_count",
    "demo_order_count",
    "demo_order_insert",
    "demo_orders_table",
    "demo_shipment_count",
    "demo_shipment_insert",
    "demo_shipments_table",
    "disable_endpoint",
    "endpoint_dead_letter_all",
    "endpoint_id_by_name",
    "endpoint_insert",
    "endpoint_mark_removed",
    "endpoint_replace",
    "endpoint_rotate_secret",
    "endpoint_set_enabled",
    "endpoint_undelivered",
    "endpoints_admin_lock",
    "endpoints_live",
    "event_ids_by_idempotency_key",
    "extend_leases",
    "inbox_purge_batch",
    "inbox_record",
    "listen",
    "load_endpoints",
    "maintainer_lease",
    "maintainer_resign",
    "migrate_lock",
    "park_blocked",
    "ping",
    "publish",
    "purge_delivered_batch",
    "purge_events_batch",
    "purge_events_lock",
    "purge_start",
    "purge_tables",
    "record_version",
    "rescue_expired",
    "schema_exists",
    "schema_version",
    "testing_published_events",
    "unpark_orphans",
]
"""Every query's name; a test and the loader keep it equal to the names in the files."""

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def _parse(text: str, source: str) -> dict[str, LiteralString]:
    """Split one file into its named blocks; a name defined twice is a bug."""
    found: dict[str, LiteralString] = {}
    pieces = _NAME.split(text)
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        if name in found:
            raise RuntimeError(f"query {name!r} defined twice in {source}")
        found[name] = cast(LiteralString, body.strip())
    return found


def _load() -> dict[QueryName, LiteralString]:
    loaded: dict[str, LiteralString] = {}
    folder = resources.files(__package__).joinpath("queries")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in _parse(entry.read_text("utf-8"), entry.name).items():
            if name in loaded:
                raise RuntimeError(f"query {name!r} defined in two files")
            loaded[name] = body
    declared = set(get_args(QueryName))
    if declared != set(loaded):
        raise RuntimeError(f"QueryName and the .sql files differ: only declared "
                           f"{sorted(declared - set(loaded))}, only in files "
                           f"{sorted(set(loaded) - declared)}")
    return cast(dict[QueryName, LiteralString], loaded)


def schema_text() -> str:
    """The packaged schema.sql (the root copy is kept identical by a test)."""
    return resources.files(__package__).joinpath("schema.sql").read_text("utf-8")


def schema_file_version() -> int:
    """The version schema.sql brings a database to (its first line says it)."""
    match = re.match(r"-- outbox-dispatcher schema, version (\d+)\.", schema_text())
    if match is None:
        raise RuntimeError("schema.sql does not start with its version line")
    return int(match.group(1))


def migrations() -> list[tuple[int, str]]:
    """Numbered upgrade steps beyond what schema.sql does, as (version, sql), in order."""
    steps: list[tuple[int, str]] = []
    folder = resources.files(__package__).joinpath("migrations")
    for entry in folder.iterdir():
        match = re.match(r"^(\d+)_.*\.sql$", entry.name)
        if match:
            steps.append((int(match.group(1)), entry.read_text("utf-8")))
    return sorted(steps)


queries: dict[QueryName, LiteralString] = _load()

__all__ = ["QueryName", "migrations", "queries", "schema_file_version", "schema_text"]
