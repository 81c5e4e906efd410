"""``outbox purge``: delete old delivered deliveries and the events nothing needs any more."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from outbox import retention
from outbox._cli import common
from outbox._shared.text import counted
from outbox.durations import parse_duration


def duration(text: str) -> timedelta:
    """argparse type for a duration: a malformed one is a usage error (exit 2)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "purge", help="delete delivered deliveries, events and inbox records older than a "
        "duration",
        description="Delete delivered deliveries finished more than DURATION ago, then events "
        "created more than DURATION ago that have no delivery left (old unrouted events "
        "included), and inbox records (event ids a receiver processed) older than DURATION: "
        "a delivery of such an event that arrives later is processed again. Pending and "
        "in-flight deliveries and dead letters, and their events, are kept. On a receiver's "
        "own database (outbox migrate --inbox-only) only the inbox is purged. Works in small "
        "batches, each its own short transaction.")
    parser.add_argument("--older-than", type=duration, required=True, metavar="DURATION",
                        help="age to keep, such as 7d or 12h")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args, needs="outbox or inbox") as conn:
        result = retention.purge(conn, args.older_than, inbox=True)
    print(f"purged {counted(result.deliveries, 'delivered delivery', 'delivered deliveries')}, "
          f"{counted(result.events, 'event')} and {counted(result.inbox, 'inbox record')}")
    return common.EXIT_OK
