"""``outbox replay``: deliver events again to one endpoint, delivered or unrouted ones too."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from outbox import admin
from outbox._cli import common
from outbox._present.args import add_tenant, event_id, moment, type_pattern
from outbox._shared.text import counted

__all__ = ["register", "since"]

since = moment  # the --since type, under the name the tests know it by


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "replay", help="deliver events again to one endpoint",
        description="Deliver events again to one endpoint: delivered, dead or unrouted ones "
        "alike, whatever their type (the endpoint's patterns are not consulted). Events that "
        "already have a pending or in-flight delivery to it are skipped. A disabled endpoint "
        "gets the deliveries too; they wait until it is enabled. Standard output gets one "
        "line: how many deliveries were put back to pending.")
    parser.add_argument("--endpoint", required=True, metavar="NAME", help="the endpoint")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--since", type=moment, metavar="TIMESTAMP",
                       help="events published at or after this time: ISO 8601 (UTC when no "
                       "zone is given), or a duration such as 2h meaning that long ago")
    which.add_argument("--event-id", type=event_id, nargs="+", action="extend",
                       dest="event_ids", metavar="ID",
                       help="these events (all must exist, else nothing is replayed)")
    parser.add_argument("--until", type=moment, metavar="TIMESTAMP",
                        help="with --since: only events published before this time")
    parser.add_argument("--type", type=type_pattern, action="append", dest="types",
                        default=[], metavar="PATTERN",
                        help="only events of a type matching this glob (repeat to or them)")
    add_tenant(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="count what would be replayed; change nothing")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.until is not None and args.since is None:
        raise common.UsageError("argument --until: goes with --since")
    common.check_window(args)
    with common.connect(args) as conn:
        result = admin.replay(conn, args.endpoint, since=args.since, event_ids=args.event_ids,
                              until=args.until, types=args.types, tenant=args.tenant,
                              dry_run=args.dry_run)
    verb = "would be replayed (dry run)" if args.dry_run else "replayed"
    line = f"{counted(result.replayed, 'event')} {verb} to endpoint {args.endpoint!r}"
    if result.skipped:
        line += f" ({result.skipped} skipped: already pending or in flight there)"
    print(line)
    if result.endpoint_dropping:
        print(f"endpoint {args.endpoint!r} is disabled with --drop: nothing is replayed there "
              "until it is enabled", file=sys.stderr)
    if not result.endpoint_enabled and result.replayed and not args.dry_run:
        print(f"endpoint {args.endpoint!r} is disabled: the deliveries wait until it is enabled",
              file=sys.stderr)
    return common.EXIT_OK
