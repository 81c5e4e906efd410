"""``outbox events list``: find events without SQL, newest first, with their deliveries."""

from __future__ import annotations

import argparse
from typing import Any

from outbox import admin
from outbox._cli import common
from outbox._present import shapes
from outbox._present.args import add_filters, positive_int
from outbox._present.shapes import rfc3339


def register(sub: Any) -> None:
    parser = sub.add_parser("events", help="find events: newest first, with their deliveries",
                            description="Events as they were published, newest first.")
    common.add_dsn_option(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser(
        "list", help="list events newest first, with each endpoint's delivery state",
        description="List events newest first: id, type, key, tenant, publish time, and "
        "the state of each endpoint's delivery of it (its latest, after a replay). Narrowed as "
        "`outbox replay` narrows: --type, --since, --until, --tenant; and --key. `outbox show "
        "EVENT_ID` tells one event's whole story.")
    add_filters(listing)
    listing.add_argument("--key", metavar="KEY", help="only events of this ordering key")
    listing.add_argument("--limit", type=positive_int, default=admin.DEFAULT_EVENTS_LIMIT,
                         metavar="N",
                         help=f"show at most N (default {admin.DEFAULT_EVENTS_LIMIT})")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_dsn_option(listing)
    listing.set_defaults(func=run_list)


def run_list(args: argparse.Namespace) -> int:
    common.check_window(args)
    where = admin.EventFilter(tuple(args.types), args.since, args.until, args.tenant)
    with common.connect(args) as conn:
        found = admin.events(conn, where=where, key=args.key, limit=args.limit)
    if args.json:
        common.print_json(shapes.events(found))
        return common.EXIT_OK
    common.print_table(
        ["published", "event id", "type", "key", "tenant", "deliveries"],
        [(rfc3339(e.created_at, seconds=True), e.event_id, e.type, e.key, e.tenant,
          ", ".join(f"{name} {state.replace('_', ' ')}"
                    for name, state in sorted(e.deliveries.items())) or "none (unrouted)")
         for e in found])
    if len(found) == args.limit:
        print(f"(the newest {args.limit}; --limit shows more)")
    return common.EXIT_OK
