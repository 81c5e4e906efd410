"""``outbox replay``: deliver events again to one endpoint, delivered or unrouted ones too."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from outbox import admin
from outbox._cli import common
from outbox._cli.dead_cmd import event_id
from outbox.durations import parse_duration


def since(text: str) -> datetime | timedelta:
    """argparse type for --since: an ISO 8601 timestamp (no zone means UTC) or a duration ago."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        pass
    else:
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        return parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: give an ISO 8601 timestamp such as 2024-05-01T12:00:00Z "
            "(UTC when no zone is given) or a duration ago such as 2h or 7d") from None


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "replay", help="deliver events again to one endpoint",
        description="Deliver events again to one endpoint: delivered, dead or unrouted ones "
        "alike, whatever their type (the endpoint's patterns are not consulted). Events that "
        "already have a pending or in-flight delivery to it are skipped. A disabled endpoint "
        "gets the deliveries too; they wait until it is enabled.")
    parser.add_argument("--endpoint", required=True, metavar="NAME", help="the endpoint")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--since", type=since, metavar="TIMESTAMP",
                       help="events created at or after this time: ISO 8601 (UTC when no "
                       "zone is given), or a duration such as 2h meaning that long ago")
    which.add_argument("--event-id", type=event_id, nargs="+", action="extend",
                       dest="event_ids", metavar="ID",
                       help="these events (all must exist, else nothing is replayed)")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        result = admin.replay(conn, args.endpoint, since=args.since, event_ids=args.event_ids)
    noun = "event" if result.replayed == 1 else "events"
    line = f"{result.replayed} {noun} replayed to endpoint {args.endpoint!r}"
    if result.skipped:
        line += f" ({result.skipped} skipped: already pending or in flight there)"
    print(line)
    if not result.endpoint_enabled and result.replayed:
        print(f"endpoint {args.endpoint!r} is disabled: the deliveries wait until it is enabled")
    return common.EXIT_OK
