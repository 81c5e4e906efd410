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
from outbox.endpoints import OPTIONS, check_tenant
from outbox.errors import InvalidEndpoint


def show(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        found = [e for e in store.list_endpoints(conn) if e.name == args.name]
        if not found:
            raise common.CommandFailed(f"no endpoint named {args.name!r}")
        # What stops its deliveries, as `outbox status` says it: what the running
        # dispatchers report (a secret or TLS files they cannot use), a pause, a circuit.
        problem = next((e.problem for e in status(conn).endpoints if e.name == args.name),
                       None)
    doc = {**store.as_json(found[0]), "problem": problem}
    if args.json:
        common.print_json(doc)
        return common.EXIT_OK
    width = max(len(key) for key in doc)
    for key, value in doc.items():
        common.print_line(f"{key.replace('_', ' '):<{width}}  {_shown(key, value)}")
    return common.EXIT_OK


_UNITS = {option.field: option.unit for option in OPTIONS if option.unit is not None}
"""Options ``show`` prints with their unit (the JSON gives bare numbers)."""


def _shown(key: str, value: Any) -> str:
    """One value of ``show`` as the table of ``list`` spells it: yes/no, units, - for none."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | dict):
        return ", ".join(map(str, value)) or "-"
    if value is None:
        return "-"
    unit = _UNITS.get(key)
    return str(value) if unit is None else f"{float(value):g}{unit}"


def list_endpoints(args: argparse.Namespace) -> int:
    tenant = None
    if args.tenant is not None:
        try:
            tenant = check_tenant(args.tenant)
        except InvalidEndpoint as exc:
            raise common.UsageError(f"--tenant {exc.problem}") from None
    with common.connect(args) as conn:
        endpoints = store.list_endpoints(conn, tenant=tenant)
    if args.json:
        common.print_json([store.as_json(e) for e in endpoints])
        return common.EXIT_OK
    rows = []
    for e in endpoints:
        c = e.columns
        state = "yes" if e.enabled else f"no ({e.disabled_reason})" if e.disabled_reason else "no"
        rows.append((c["name"], state, shown_url(c["url"]), ",".join(c["events"]),
                     e.signing or "-", c["format"], c["max_in_flight"],
                     f"{c['rate_limit']:g}/s" if c["rate_limit"] else "-", c["max_batch"],
                     c["max_pending"] or "-", c["max_pending_per_tenant"] or "-",
                     c["max_attempts"], c["tenant"] or "-"))
    common.print_table(("name", "enabled", "url", "events", "signing", "format", "in flight",
                        "rate", "batch", "max pending", "per tenant", "attempts", "tenant"),
                       rows)
    return common.EXIT_OK


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
