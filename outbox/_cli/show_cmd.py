"""``outbox show EVENT_ID``: one event's whole story, every attempt at every endpoint."""

from __future__ import annotations

import argparse
import json
from typing import Any

from outbox import history
from outbox._cli import common
from outbox._present import shapes
from outbox._present.args import event_id
from outbox._present.shapes import rfc3339
from outbox._shared.text import counted
from outbox.errors import EventsNotFound


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "show", help="one event's whole story: every attempt at every endpoint",
        description="One event: its type, key, tenant (when it has one), publish time and "
        "trace, and for each endpoint the state of its delivery and every attempt made, "
        "oldest first (a retry or a replay goes on counting attempts). Failed attempts give "
        "their HTTP status, reason, duration and error; the history lasts as long as its "
        "delivery.")
    parser.add_argument("event_id", type=event_id, metavar="EVENT_ID", help="the event's id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--payload", action="store_true",
                        help="print the event's payload too (it may hold personal data)")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.connect(args) as conn:
        try:
            story = history.show(conn, args.event_id)
        except EventsNotFound:
            raise common.CommandFailed(f"no event {args.event_id} (unknown, or purged)") from None
    if args.json:
        common.print_json(shapes.story(story, payload=args.payload))
        return common.EXIT_OK
    lines = as_text(story)
    if args.payload:
        end = len(_header(story))
        lines[end:end] = ["  payload", *("    " + line for line in json.dumps(
            json.loads(story.payload), indent=2, ensure_ascii=False).splitlines())]
    for line in lines:
        common.print_line(line)
    return common.EXIT_OK


def _header(story: history.EventStory) -> list[str]:
    """The event's own lines, ending with its trace (``--payload`` goes right after).

    The tenant line is there only for an event that has one: most have none,
    and a header that keeps its shape for them keeps it for what reads it."""
    lines = [f"event {story.event_id}",
             f"  type       {story.type}",
             f"  key        {story.key if story.key is not None else '-'}"]
    if story.tenant is not None:
        lines.append(f"  tenant     {story.tenant}")
    return [*lines, f"  published  {rfc3339(story.created_at, seconds=True)}",
            f"  trace      {story.trace_id or '-'}"]


def as_text(story: history.EventStory) -> list[str]:
    """A header, then one block per endpoint with one line per attempt."""
    lines = _header(story)
    if not story.deliveries:
        lines += ["", "no deliveries (unrouted: no endpoint subscribed to its type; "
                  "`outbox replay` can send it)"]
    for d in story.deliveries:
        head = f"{d.endpoint}{' (removed)' * d.endpoint_removed}: {d.state.replace('_', ' ')}"
        head += f", {counted(d.attempts, 'attempt')}"
        if d.waiting_for_key:
            head += ", waiting for an earlier event of its key"
        elif d.next_attempt_at is not None:
            head += f", next attempt {rfc3339(d.next_attempt_at, seconds=True)}"
        lines += ["", head]
        for a in d.history:
            status = str(a.status) if a.status is not None else "-"
            took = f"{a.duration_seconds:.3f}s" if a.duration_seconds is not None else "-"
            what = "ok" if a.reason is None else a.reason
            at = rfc3339(a.at, seconds=True)
            line = f"  #{a.attempt:<3} {at}  {status:>3}  {took:>8}  {what}"
            if a.error:
                line += f"  {' '.join(a.error.split())}"
            lines.append(line.rstrip())
        unrecorded = d.attempts - len(d.history) - (d.state == "in_flight")
        if unrecorded > 0:
            lines.append(f"  ({counted(unrecorded, 'earlier attempt')} without a record: "
                         "made before the history existed, or cut off)")
        # A discarded delivery always says why (its endpoint's policy), whatever it tried.
        if d.last_error and (d.state == "discarded"
                             or (d.state == "dead" and not any(a.error for a in d.history))):
            lines.append(f"  last error: {' '.join(d.last_error.split())}")
    return lines
