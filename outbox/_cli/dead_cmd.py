"""``outbox dead list`` and ``outbox dead retry``: inspect and revive dead letters."""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime
from typing import Any

from outbox import admin
from outbox._cli import common

_ERROR_WIDTH = 60


def event_id(text: str) -> uuid.UUID:
    """argparse type for an event id: a malformed one is a usage error (exit 2)."""
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid event id {text!r}: not a UUID") from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: give a whole number >= 1")
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser("dead", help="list and retry dead-lettered deliveries",
                            description="Dead letters: deliveries that ran out of attempts, "
                            "got a permanent error, or whose endpoint was removed by force.")
    common.add_dsn_option(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    listing = actions.add_parser(
        "list", help="show dead letters, newest first",
        description="Show dead letters, newest first. Removed endpoints' dead letters "
        "are listed too.")
    listing.add_argument("--endpoint", metavar="NAME", help="only this endpoint's")
    listing.add_argument("--limit", type=positive_int, default=admin.DEFAULT_DEAD_LIMIT,
                         metavar="N", help=f"show at most N (default {admin.DEFAULT_DEAD_LIMIT})")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_dsn_option(listing)
    listing.set_defaults(func=run_list)

    retry = actions.add_parser(
        "retry", help="put dead letters back to pending with fresh attempts",
        description="Put dead deliveries back to pending with their attempts reset; "
        "dispatchers pick them up at once. Their last error stays visible until the next "
        "attempt replaces it. Dead letters of removed endpoints are not retried.")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("--event-id", type=event_id, nargs="+", action="extend",
                       dest="event_ids", metavar="ID",
                       help="the dead deliveries of these events (any endpoint)")
    which.add_argument("--endpoint", metavar="NAME", help="every dead delivery of this endpoint")
    which.add_argument("--all", action="store_true", dest="everything",
                       help="every dead delivery of every live endpoint")
    common.add_dsn_option(retry)
    retry.set_defaults(func=run_retry)


def run_list(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        letters = admin.dead_letters(conn, endpoint=args.endpoint, limit=args.limit)
    if args.json:
        common.print_json([{
            "event_id": d.event_id, "endpoint": d.endpoint, "type": d.type, "key": d.key,
            "attempts": d.attempts, "last_error": d.last_error, "last_status": d.last_status,
            "failed_at": rfc3339(d.failed_at),
        } for d in letters])
        return common.EXIT_OK
    common.print_table(
        ["failed at", "endpoint", "event id", "type", "key", "attempts", "status", "last error"],
        [(rfc3339(d.failed_at, seconds=True), d.endpoint + (" (removed)" * d.endpoint_removed),
          d.event_id, d.type, d.key, d.attempts, d.last_status, _one_line(d.last_error))
         for d in letters],
    )
    if len(letters) == args.limit:
        print(f"(the newest {args.limit}; --limit shows more)")
    return common.EXIT_OK


def run_retry(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        result = admin.retry_dead(conn, event_ids=args.event_ids, endpoint=args.endpoint,
                                  everything=args.everything)
    noun = "delivery" if result.retried == 1 else "deliveries"
    print(f"{result.retried} dead {noun} retried")
    for name in result.disabled_endpoints:
        print(f"endpoint {name!r} is disabled: its retried deliveries wait until it is enabled")
    return common.EXIT_OK


def rfc3339(moment: datetime | None, *, seconds: bool = False) -> str | None:
    """UTC, RFC 3339 with a Z: 2024-05-01T12:00:00.123456Z."""
    if moment is None:
        return None
    text = moment.astimezone(UTC).isoformat(timespec="seconds" if seconds else "auto")
    return text.replace("+00:00", "Z")


def _one_line(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= _ERROR_WIDTH else flat[:_ERROR_WIDTH - 3] + "..."
