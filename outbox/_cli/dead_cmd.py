"""``outbox dead list | retry | discard``: inspect, revive and drop dead letters."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from outbox import admin
from outbox._cli import common
from outbox._present import shapes
from outbox._present.args import add_filters, event_id, moment, positive_int
from outbox._present.shapes import rfc3339
from outbox._shared.text import counted

__all__ = ["event_id", "positive_int", "register", "rfc3339"]

_ERROR_WIDTH = 60


def register(sub: Any) -> None:
    parser = sub.add_parser("dead", help="list, retry and discard dead-lettered deliveries",
                            description="Dead letters: deliveries that ran out of attempts, "
                            "got a permanent error, or whose endpoint was removed by force.")
    common.add_dsn_option(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    listing = actions.add_parser(
        "list", help="show dead letters, newest first",
        description="Show dead letters, newest first. Removed endpoints' dead letters "
        "are listed too. --json gives each whole last_error.")
    listing.add_argument("--endpoint", metavar="NAME", help="only this endpoint's")
    add_filters(listing)
    listing.add_argument("--failed-since", type=moment, metavar="TIMESTAMP",
                         help="only deliveries dead-lettered at or after this time (--since "
                         "and --until bound the event's publish time)")
    listing.add_argument("--limit", type=positive_int, default=admin.DEFAULT_DEAD_LIMIT,
                         metavar="N", help=f"show at most N (default {admin.DEFAULT_DEAD_LIMIT})")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_dsn_option(listing)
    listing.set_defaults(func=run_list)

    retry = actions.add_parser(
        "retry", help="put dead letters back to pending with fresh attempts",
        description="Put dead deliveries back to pending with their attempts reset; "
        "dispatchers pick them up at once. Their last error stays visible until the next "
        "attempt replaces it. Dead letters of removed endpoints are not retried: standard "
        "error names them. Standard output gets one line: how many were retried.")
    _selectors(retry, "retry")
    retry.set_defaults(func=run_retry)

    discard = actions.add_parser(
        "discard", help="delete dead letters on purpose",
        description="Delete dead deliveries, with their attempt history, for good. "
        "Removed endpoints' dead letters may be discarded too. Standard output gets one "
        "line: how many were discarded. Try --dry-run first.")
    _selectors(discard, "discard")
    discard.set_defaults(func=run_discard)


def _selectors(parser: argparse.ArgumentParser, verb: str) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--event-id", type=event_id, nargs="+", action="extend",
                       dest="event_ids", metavar="ID",
                       help=f"{verb} the dead deliveries of these events (any endpoint)")
    which.add_argument("--endpoint", metavar="NAME", help=f"{verb} this endpoint's")
    which.add_argument("--all", action="store_true", dest="everything",
                       help=f"{verb} every dead delivery")
    add_filters(parser)
    done = "discarded" if verb == "discard" else "retried"
    parser.add_argument("--dry-run", action="store_true",
                        help=f"count what would be {done}; change nothing")
    common.add_dsn_option(parser)


def _where(args: argparse.Namespace) -> admin.EventFilter:
    common.check_window(args)
    return admin.EventFilter(tuple(args.types), args.since, args.until, args.tenant)


def run_list(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        letters = admin.dead_letters(conn, endpoint=args.endpoint, limit=args.limit,
                                     where=_where(args), failed_since=args.failed_since)
    if args.json:
        common.print_json(shapes.dead_letters(letters))
        return common.EXIT_OK
    common.print_table(
        ["failed at", "published", "endpoint", "event id", "type", "key", "tenant", "attempts",
         "status", "last error"],
        [(rfc3339(d.failed_at, seconds=True), rfc3339(d.created_at, seconds=True),
          d.endpoint + (" (removed)" * d.endpoint_removed),
          d.event_id, d.type, d.key, d.tenant, d.attempts, d.last_status,
          _one_line(d.last_error))
         for d in letters],
    )
    if len(letters) == args.limit:
        print(f"(the newest {args.limit}; --limit shows more)")
    return common.EXIT_OK


def run_retry(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        result = admin.retry_dead(conn, event_ids=args.event_ids, endpoint=args.endpoint,
                                  everything=args.everything, where=_where(args),
                                  dry_run=args.dry_run)
    verb = "would be retried (dry run)" if args.dry_run else "retried"
    print(f"{counted(result.retried, 'dead delivery', 'dead deliveries')} {verb}")
    for name, count in result.skipped.items():
        print(f"skipped {counted(count, 'dead letter')} of endpoint {name!r}: it was removed "
              "(replay their events to a live endpoint, or discard them)", file=sys.stderr)
    for name in result.disabled_endpoints:
        print(f"endpoint {name!r} is disabled: its retried deliveries wait until it is enabled",
              file=sys.stderr)
    for name in result.dropping_endpoints:
        print(f"endpoint {name!r} is disabled with --drop: its dead letters are not retried "
              "(nor counted) until it is enabled", file=sys.stderr)
    return common.EXIT_OK


def run_discard(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        count = admin.discard_dead(conn, event_ids=args.event_ids, endpoint=args.endpoint,
                                   everything=args.everything, where=_where(args),
                                   dry_run=args.dry_run)
    verb = "would be discarded (dry run)" if args.dry_run else "discarded"
    print(f"{counted(count, 'dead delivery', 'dead deliveries')} {verb}")
    return common.EXIT_OK


def _one_line(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= _ERROR_WIDTH else flat[:_ERROR_WIDTH - 3] + "..."
