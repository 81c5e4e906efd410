"""``outbox purge``: delete old finished deliveries and the events nothing needs any more."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from outbox import retention
from outbox._cli import common
from outbox._shared import argtypes
from outbox._shared.text import counted

SHORTEST = timedelta(seconds=1)


def duration(text: str) -> timedelta:
    """argparse type for ``--older-than``: a malformed duration, or one under a second, is
    a usage error (exit 2). ``0`` would delete every delivered delivery at once, although
    a retention of 0 means "never": a slip of that kind is refused, not carried out."""
    value = argtypes.duration(text)
    if value < SHORTEST:
        raise argparse.ArgumentTypeError(
            f"{text!r} is under one second: purge keeps at least the last second "
            "(to delete nearly everything, say so with a duration such as 1s)")
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "purge", help="delete delivered or discarded deliveries, events and inbox records "
        "older than a duration",
        description="Delete delivered deliveries, and those discarded by their endpoint's "
        "policy, finished more than DURATION ago, then events "
        "created more than DURATION ago that have no delivery left (old unrouted events "
        "included), and inbox records (event ids a receiver processed) older than DURATION: "
        "a delivery of such an event that arrives later is processed again. Pending and "
        "in-flight deliveries and dead letters, and their events, are kept. On a receiver's "
        "own database (outbox migrate --inbox-only) only the inbox is purged. Works in small "
        "batches, each its own short transaction.")
    parser.add_argument("--older-than", type=duration, required=True, metavar="DURATION",
                        help="age to keep, such as 7d or 12h (at least 1s)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be deleted and delete nothing")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args, needs="outbox or inbox") as conn:
        if args.dry_run:
            result = retention.would_purge(conn, args.older_than, inbox=True)
        else:
            result = retention.purge(conn, args.older_than, inbox=True)
    verb = "would purge" if args.dry_run else "purged"
    finished = counted(result.deliveries, "delivered or discarded delivery",
                       "delivered or discarded deliveries")
    print(f"{verb} {finished}, "
          f"{counted(result.events, 'event')} and {counted(result.inbox, 'inbox record')}")
    return common.EXIT_OK
