"""Argument types of the commands and the web view: each turns a bad value into a usage error.

argparse reports an ``ArgumentTypeError`` as one line naming the option as
typed (exit 2), the web view as a page's 400; nothing here reaches the
database with a value it would refuse (a number beyond its range, a time
before year 1), nor a window that holds nothing.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime, timedelta

from outbox._event import check_tenant
from outbox.durations import parse_duration
from outbox.endpoints import check_patterns
from outbox.errors import InvalidEndpoint, InvalidEvent

MAX_COUNT = 1_000_000_000
"""The largest count an option takes (--limit): well inside the database's integers."""


def event_id(text: str) -> uuid.UUID:
    """An event id: a malformed one is a usage error (exit 2)."""
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid event id {text!r}: not a UUID") from None


def positive_int(text: str) -> int:
    """A whole number from 1 to :data:`MAX_COUNT`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: give a whole number >= 1")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"invalid number {text!r}: at most {MAX_COUNT:,}".replace(",", "_"))
    return value


def moment(text: str) -> datetime | timedelta:
    """A time: an ISO 8601 timestamp (no zone means UTC) or a duration back from now.

    A bare number is neither: ``2026`` read as seconds ago and ``20261201`` as a
    date (both are valid to the parsers) would make one option mean two kinds of
    thing, so digits alone are refused, naming both ways to say it.
    """
    if text.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: a bare number is ambiguous; give a date such as "
            "2026-12-01 (or 2026-12-01T12:00:00Z) or a duration with its unit such as "
            f"{text.strip()}s or 2h")
    try:
        found = datetime.fromisoformat(text.strip())
    except ValueError:
        pass
    else:
        return found if found.tzinfo else found.replace(tzinfo=UTC)
    try:
        ago = parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: give an ISO 8601 timestamp such as 2024-05-01T12:00:00Z "
            "(UTC when no zone is given) or a duration ago such as 2h or 7d") from None
    try:
        datetime.now(UTC) - ago
    except OverflowError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: that long ago is before year 1") from None
    return ago


class EmptyWindow(ValueError):
    """A time window whose start is not before its end: it holds nothing."""

    def __init__(self, start: datetime, end: datetime) -> None:
        super().__init__(start, end)
        self.start, self.end = start, end

    def said(self, prefix: str) -> str:
        """The refusal, naming the options with ``prefix`` (``--`` on the command line)."""
        return (f"{prefix}until: {self.end.isoformat(timespec='seconds')} is not after "
                f"{prefix}since {self.start.isoformat(timespec='seconds')}: the window is empty")


def check_window(since: datetime | timedelta | None, until: datetime | timedelta | None) -> None:
    """A time window that holds nothing is a mistake, said as one, not ``(none)``.

    ``since`` and ``until`` are each a timestamp or a duration back from now
    (:func:`moment`), compared on one clock; EmptyWindow when the window is empty.
    """
    if since is None or until is None:
        return
    now = datetime.now(UTC)
    start = now - since if isinstance(since, timedelta) else since
    end = now - until if isinstance(until, timedelta) else until
    if start >= end:
        raise EmptyWindow(start, end)


def type_pattern(text: str) -> str:
    """A glob pattern over event types, as ``--events`` takes."""
    try:
        return check_patterns([text])[0]
    except InvalidEndpoint:
        raise argparse.ArgumentTypeError(
            f"invalid pattern {text!r}: use event-type words separated by dots, '*' for "
            "any run of characters and '?' for one, such as 'mail.*'") from None


_TENANT_SHOWN = 40
"""How much of a refused tenant its error quotes: enough to recognise, one short line."""


def tenant(text: str) -> str:
    """A tenant, refused as ``publish`` refuses it: a value no event can carry would
    select nothing, and saying so beats an empty listing or a count of 0."""
    try:
        check_tenant(text)
    except InvalidEvent as exc:
        shown = text if len(text) <= _TENANT_SHOWN else text[:_TENANT_SHOWN - 3] + "..."
        raise argparse.ArgumentTypeError(
            f"invalid tenant {shown!r}: {str(exc).removeprefix('tenant ')}") from None
    return text


def add_tenant(parser: argparse.ArgumentParser) -> None:
    """--tenant: only the events of one tenant (events without a tenant never match)."""
    parser.add_argument("--tenant", type=tenant, metavar="TENANT",
                        help="only events of this tenant (as published: 1-200 printable "
                        "ASCII characters)")


def add_filters(parser: argparse.ArgumentParser, *, until_help: str = "") -> None:
    """--type, --since, --until and --tenant: the event filters of dead letters and replays."""
    parser.add_argument("--type", type=type_pattern, action="append", dest="types",
                        default=[], metavar="PATTERN",
                        help="only events of a type matching this glob (repeat to or them)")
    parser.add_argument("--since", type=moment, metavar="TIMESTAMP",
                        help="only events published at or after this time: ISO 8601 (UTC "
                        "when no zone is given), or a duration such as 2h meaning that long ago")
    parser.add_argument("--until", type=moment, metavar="TIMESTAMP",
                        help="only events published before this time" + until_help)
    add_tenant(parser)
