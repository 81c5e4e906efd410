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
from dataclasses import dataclass
from importlib import resources
from typing import Literal, LiteralString, cast, get_args

QueryName = Literal[
    "admin_dead_discard",
    "admin_dead_list",
    "admin_dispatchers",
    "admin_endpoint_ever_existed",
    "admin_events_list",
    "admin_key_waits",
    "admin_live_endpoint",
    "admin_missing_events",
    "admin_moment",
    "admin_replay",
    "admin_replay_lock",
    "admin_retry_dead",
    "admin_status",
    "admin_tenant_backlogs",
    "backend_pid",
    "backlog",
    "bound_outside",
    "bury_removed",
    "catalog_relations",
    "catalog_settings",
    "claim",
    "complete",
    "database_due",
    "databases_activity",
    "delivery_log",
    "delivery_log_endpoints",
    "demo_dead_count",
    "demo_order_count",
    "demo_order_insert",
    "demo_orders_table",
    "demo_shipment_count",
    "demo_shipment_insert",
    "demo_shipments_table",
    "demo_watch",
    "disable_endpoint",
    "discard_over",
    "dispatcher_privileges",
    "due_endpoints",
    "endpoint_dead_letter_all",
    "endpoint_discard_pending",
    "endpoint_id_by_name",
    "endpoint_insert",
    "endpoint_mark_removed",
    "endpoint_retry_count",
    "endpoint_retry_now",
    "endpoint_retry_target",
    "endpoint_rotate_secret",
    "endpoint_send_test",
    "endpoint_set_enabled",
    "endpoint_set_headers",
    "endpoint_set_secret",
    "endpoint_undelivered",
    "endpoint_update",
    "endpoint_versions",
    "endpoints_admin_lock",
    "endpoints_fingerprint",
    "endpoints_full",
    "endpoints_live",
    "event_ids_by_idempotency_key",
    "expire_dead",
    "extend_leases",
    "fleet_beat",
    "fleet_members",
    "grants_held",
    "grants_recorded",
    "grants_roles",
    "heartbeat",
    "heartbeat_stop",
    "heartbeat_sweep",
    "horizon",
    "inbox_purge_batch",
    "inbox_record",
    "inbox_would_purge",
    "listen",
    "listen_probe",
    "load_endpoints",
    "maintainer_lease",
    "maintainer_resign",
    "migrate_holders",
    "migrate_lock",
    "migrate_role",
    "migrate_session_lock",
    "migrate_session_unlock",
    "park_blocked",
    "pending_count",
    "ping",
    "publish",
    "purge_events_batch",
    "purge_events_lock",
    "purge_finished_batch",
    "purge_start",
    "purge_tables",
    "purge_would_delete",
    "record_version",
    "rescue_expired",
    "schema_objects",
    "schema_versions",
    "script_pin_search_path",
    "script_unpin_search_path",
    "served_by",
    "session_search_path",
    "set_lock_timeout",
    "set_search_path",
    "show_attempts",
    "show_deliveries",
    "show_event",
    "testing_published_events",
    "unpark_orphans",
    "version_table",
    "web_endpoint_circuit",
    "web_endpoint_failures",
    "web_endpoint_options",
    "web_is_tenant",
    "web_last_failures",
    "web_minutes",
    "web_short_walk",
    "web_tenant_waits",
    "web_tenants",
    "writable_paths",
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


def grants_text(part: str = "grants") -> str:
    """The packaged grants.sql: the application's and the dispatcher's privileges,
    with ``{application}`` and ``{dispatcher}`` where their role names go; ``part``
    ``"grants_viewer"``: the read-only viewer's, which goes in its ``{viewer_grants}``."""
    return resources.files(__package__).joinpath(f"{part}.sql").read_text("utf-8")


def schema_text() -> str:
    """The packaged schema.sql, the one that is edited (``./dev docs`` writes the root copy
    from it, and a test keeps the two identical)."""
    return resources.files(__package__).joinpath("schema.sql").read_text("utf-8")


@dataclass(frozen=True, slots=True)
class Step:
    """One numbered upgrade step, ``migrations/NNNN_name.sql``.

    Markers in its leading comment lines: ``-- step: inbox`` (part of the
    inbox, applied by ``outbox migrate --inbox-only`` too) and ``-- step:
    no-transaction`` (statements that cannot run in a transaction, such as
    ``CREATE INDEX CONCURRENTLY``: run one by one, each written to be safe to
    run again, the version row recorded after the last).
    """

    version: int
    name: str
    sql: str
    inbox: bool = False
    transactional: bool = True

    def statements(self) -> list[str]:
        """A no-transaction step's statements, run one by one: each ends with ``;`` at the
        end of a line (a DO block's inner lines must not), comments alone are dropped."""
        found, current = [], []
        for line in self.sql.splitlines():
            current.append(line)
            if line.rstrip().endswith(";"):
                statement = "\n".join(current).strip()
                current = []
                if any(not part.strip().startswith("--") for part in statement.splitlines()
                       if part.strip()):
                    found.append(statement)
        return found


_STEP_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_MARKER = re.compile(r"^--\s*step:\s*([a-z-]+)\s*$")
_MARKERS = {"inbox", "no-transaction"}


def _step(file_name: str, text: str) -> Step:
    match = _STEP_FILE.match(file_name)
    if match is None:
        raise RuntimeError(f"migrations/{file_name}: not named NNNN_name.sql")
    markers: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        found = _MARKER.match(line)
        if found:
            markers.add(found.group(1))
    if markers - _MARKERS:
        raise RuntimeError(f"migrations/{file_name}: unknown marker {sorted(markers - _MARKERS)}")
    return Step(int(match.group(1)), file_name.removesuffix(".sql"), text,
                inbox="inbox" in markers, transactional="no-transaction" not in markers)


def steps() -> tuple[Step, ...]:
    """The packaged upgrade steps, in order; their numbers start at 2 and increase.

    Version 1 is the first release's schema: a database without the outbox is
    made by schema.sql, which is always the current shape, never by steps.
    A number may be skipped (a step reserved by a change not yet released),
    never repeated.
    """
    folder = resources.files(__package__).joinpath("migrations")
    found = sorted((_step(entry.name, entry.read_text("utf-8"))
                    for entry in folder.iterdir() if entry.name.endswith(".sql")),
                   key=lambda step: step.version)
    numbers = [step.version for step in found]
    if (numbers and numbers[0] < 2) or len(set(numbers)) != len(numbers):
        raise RuntimeError(f"migrations/ steps must be numbered from 2 up, each once: "
                           f"found {numbers}")
    return tuple(found)


queries: dict[QueryName, LiteralString] = _load()

SCHEMA_VERSION: int = steps()[-1].version
"""The version this package's schema ends at: its last step's (schema.sql records it too)."""

__all__ = ["SCHEMA_VERSION", "QueryName", "Step", "grants_text", "queries", "schema_text",
           "steps"]
