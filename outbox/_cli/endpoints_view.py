"""What ``outbox endpoints`` shows: ``list`` (with the limits), ``show NAME``, the sync plan.

Secrets are shown only as their kind (``whsec``, ``env:NAME``), header
values never (they are often credentials).
"""

from __future__ import annotations

import argparse
from typing import Any

from outbox import endpoints as store
from outbox._cli import common
from outbox._shared.text import counted
from outbox._shared.urls import shown_url
from outbox.admin import status
from outbox.endpoints import signing_label


def show(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        found = [e for e in store.list_endpoints(conn) if e.name == args.name]
        if not found:
            raise common.CommandFailed(f"no endpoint named {args.name!r}")
        # What stops its deliveries, as `outbox status` says it: what the running
        # dispatchers report (a secret or TLS files they cannot use), a pause, a circuit.
        problem = next((e.problem for e in status(conn).endpoints if e.name == args.name),
                       None)
    doc = {**as_json(found[0]), "problem": problem}
    if args.json:
        common.print_json(doc)
        return common.EXIT_OK
    width = max(len(key) for key in doc)
    for key, value in doc.items():
        common.print_line(f"{key.replace('_', ' '):<{width}}  {_shown(key, value)}")
    return common.EXIT_OK


_SECONDS = {"timeout", "min_backoff", "max_backoff", "breaker_cooldown", "breaker_window"}
"""Options ``show`` prints with their unit (the JSON gives them as numbers of seconds)."""


def _shown(key: str, value: Any) -> str:
    """One value of ``show`` as the table of ``list`` spells it: yes/no, units, - for none."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | dict):
        return ", ".join(map(str, value)) or "-"
    if value is None:
        return "-"
    unit = "s" if key in _SECONDS else "/s" if key == "rate_limit" else None
    return str(value) if unit is None else f"{float(value):g}{unit}"


def list_endpoints(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        endpoints = store.list_endpoints(conn)
    if args.json:
        common.print_json([as_json(e) for e in endpoints])
        return common.EXIT_OK
    rows = []
    for e in endpoints:
        c = e.columns
        state = "yes" if e.enabled else f"no ({e.disabled_reason})" if e.disabled_reason else "no"
        rows.append((c["name"], state, shown_url(c["url"]), ",".join(c["events"]),
                     signing_label(c["secret"]) or "-", c["format"], c["max_in_flight"],
                     f"{c['rate_limit']:g}/s" if c["rate_limit"] else "-", c["max_batch"],
                     c["max_pending"] or "-", c["max_pending_per_tenant"] or "-",
                     c["max_attempts"]))
    common.print_table(("name", "enabled", "url", "events", "signing", "format", "in flight",
                        "rate", "batch", "max pending", "per tenant", "attempts"), rows)
    return common.EXIT_OK


def as_json(e: store.StoredEndpoint) -> dict[str, Any]:
    """Every option of an endpoint; the secret reduced to its kind, header values hidden."""
    c = e.columns
    rotation_ends = max((str(p.get("expires_at")) for p in e.previous_secrets), default=None)
    return {
        # Query values may be tokens (?token=...): masked, as header values are.
        "name": c["name"], "url": shown_url(c["url"]), "events": c["events"],
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


def print_plan(report: store.SyncReport, *, force: bool) -> int:
    """sync --dry-run: what the sync would do, line by line; nothing was changed."""
    for name in report.added:
        common.print_line(f"would add {name}")
    for name, options in report.changed.items():
        common.print_line(f"would change {name}: {', '.join(options)}")
    busy = []
    for name, undelivered in report.removed.items():
        line = f"would remove {name}"
        if undelivered:
            them = counted(undelivered, "undelivered delivery", "undelivered deliveries")
            line += (f" and dead-letter its {them}" if force else
                     f": it has {them}, refused without --force "
                     "(forced, they become dead letters)")
            busy.append(name)
        common.print_line(line)
    print(f"sync --dry-run: {len(report.added)} to add, {len(report.changed)} to change, "
          f"{len(report.removed)} to remove, {len(report.unchanged)} unchanged; "
          "nothing changed")
    return common.EXIT_OK
