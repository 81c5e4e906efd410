"""``outbox status``: the backlog of every live endpoint, and the unrouted events."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from outbox import admin
from outbox._cli import common


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status", help="deliveries by state for each endpoint, and unrouted events",
        description="Per live endpoint: pending, in-flight, delivered and dead deliveries and "
        "the age of the oldest pending one (0 when nothing is pending), and the state of its "
        "circuit breaker (closed, open, half-open) and its --max-pending bound with the "
        "pending and in-flight deliveries held against it; then the number "
        "of unrouted events (published while no endpoint subscribed to their type).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        result = admin.status(conn)
        waits = admin.key_waits(conn) if not args.json else None
    if args.json:
        common.print_json({
            "endpoints": [asdict(e) for e in result.endpoints],
            "unrouted": result.unrouted,
        })
        return common.EXIT_OK
    common.print_table(
        ["endpoint", "state", "circuit", "pending", "in flight", "bound", "delivered", "dead",
         "oldest pending"],
        [(e.name, "enabled" if e.enabled else "disabled", e.circuit, e.pending, e.in_flight,
          _bound(e), e.delivered, e.dead,
          format_age(e.oldest_pending_seconds) if e.pending else "-")
         for e in result.endpoints],
    )
    print(f"unrouted events: {result.unrouted}")
    if waits is not None and waits.waiting:
        print(f"publishers waiting for a key: {waits.waiting} (longest "
              f"{format_age(waits.longest_wait_seconds)}, behind a transaction open for "
              f"{format_age(waits.oldest_holder_seconds)})")
    return common.EXIT_OK


def _bound(e: admin.EndpointStatus) -> str:
    """Undelivered against the --max-pending bound, as a percentage of it; "-" if none."""
    if e.max_pending is None:
        return "-"
    undelivered = e.pending + e.in_flight
    return f"{undelivered}/{e.max_pending} ({100 * undelivered // e.max_pending}%)"


def format_age(seconds: float) -> str:
    """A short human age: 45s, 12m05s, 3h07m, 2d04h."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"
