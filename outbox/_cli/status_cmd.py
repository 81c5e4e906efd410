"""``outbox status``: the backlog of every live endpoint, the unrouted events, and who holds
the database's horizon back when someone does."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import Any

from outbox import admin
from outbox._cli import common
from outbox._present import overview, shapes
from outbox._present.words import alive_line, describe_horizon, format_age, served_line


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status", help="deliveries by state for each endpoint, and unrouted events",
        description="Per live endpoint: pending, in-flight, delivered and dead deliveries and "
        "the age of the oldest pending one (0 when nothing is pending), and the state of its "
        "circuit breaker (closed, open, half-open) and its --max-pending bound with the "
        "pending and in-flight deliveries held against it, and what stops its deliveries "
        "when something does; then the number of unrouted events (published while no "
        "endpoint subscribed to their type) and of dispatchers alive (by their heartbeats); "
        "and the session, replication slot or prepared transaction that keeps vacuum from "
        "removing dead deliveries, when one has for 10,000 transaction ids or 60 s.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--tenants", action="store_true",
                        help="also list, per endpoint, the tenants with the largest backlogs "
                        f"(at most {admin.TENANTS_PER_ENDPOINT}, pending plus in flight)")
    parser.add_argument("--watch", nargs="?", type=_interval, const=2.0, metavar="SECONDS",
                        help="redraw every SECONDS (default 2) until interrupted")
    parser.add_argument("--all", action="store_true",
                        help="with --databases: one line per database of the file (its state, "
                        "pending and dead deliveries, oldest pending age), the oldest "
                        "backlog first")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"invalid interval {text!r}: give seconds from "
                                         "0.1 to 3600")
    return value


def run(args: argparse.Namespace) -> int:
    if args.all:
        return _run_all(args)
    if args.watch is None:
        with common.connect(args) as conn:
            _show(conn, as_json=args.json, tenants=args.tenants)
        return common.EXIT_OK
    clear = "\033[H\033[2J" if sys.stdout.isatty() else ""
    try:
        with common.connect(args) as conn:
            while True:
                sys.stdout.write(clear)
                print(datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
                _show(conn, as_json=args.json, tenants=args.tenants)
                sys.stdout.flush()
                time.sleep(args.watch)
    except KeyboardInterrupt:
        return common.EXIT_OK


def _run_all(args: argparse.Namespace) -> int:
    """``status --all``: every database of the file, each read apart (see overview)."""
    if args.tenants:
        raise common.UsageError("--tenants goes with one database, not with --all")
    path = common.file_for_all(args, "lists every database")
    listing = common.all_databases(path)
    clear = "\033[H\033[2J" if sys.stdout.isatty() else ""
    try:
        while True:
            rows = overview.read_all(listing.databases, listing.aside)
            if args.watch is not None:
                sys.stdout.write(clear)
                print(datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
            _show_all(rows, as_json=args.json)
            if args.watch is None:
                return common.EXIT_OK
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return common.EXIT_OK


def _show_all(rows: list[overview.DatabaseState], *, as_json: bool) -> None:
    if as_json:
        common.print_json(overview.shape(rows))
        return
    common.print_table(
        ["database", "state", "pending", "dead", "oldest pending", "reason"],
        [(r.database, r.state, "-" if r.pending is None else r.pending,
          "-" if r.dead is None else r.dead,
          "-" if not r.pending else format_age(r.oldest_pending_seconds or 0.0),
          r.reason or "") for r in rows])


def _show(conn: Any, *, as_json: bool, tenants: bool = False) -> None:
    result = admin.status(conn)
    waits = admin.key_waits(conn) if not as_json else None
    holder = admin.horizon(conn)
    backlogs = admin.tenant_backlogs(conn) if tenants else None
    if as_json:
        shown = shapes.status(result, holder, backlogs)
        common.print_json(shown)
        return
    # The discarded column only where an endpoint's policy discarded something.
    discarding = any(e.discarded for e in result.endpoints)
    common.print_table(
        ["endpoint", "state", "circuit", "pending", "in flight", "bound", "delivered", "dead",
         *(["discarded"] if discarding else []), "oldest pending"],
        [(e.name, "enabled" if e.enabled else "disabled", e.circuit, e.pending, e.in_flight,
          _bound(e), e.delivered, e.dead, *([e.discarded] if discarding else []),
          format_age(e.oldest_pending_seconds) if e.pending else "-")
         for e in result.endpoints],
    )
    for e in result.endpoints:
        if e.problem:
            common.print_line(f"endpoint {e.name}: {e.problem}")
    if backlogs is not None:
        if backlogs:
            common.print_table(
                ["endpoint", "tenant", "pending", "in flight", "oldest pending"],
                [(b.endpoint, b.tenant, b.pending, b.in_flight,
                  format_age(b.oldest_pending_seconds) if b.pending else "-")
                 for b in backlogs])
        else:
            print("tenants: no endpoint holds undelivered deliveries of a tenant")
    if any(e.delivered for e in result.endpoints):
        print("delivered: the deliveries retention still keeps (the dispatcher purges them "
              "after its --retention); outbox_delivered_total counts them all")
    if discarding:
        print("discarded: deliveries the endpoint's policy dropped (--when-full drop-oldest, "
              "disable --drop, --keep-dead) that retention still keeps; outbox_dropped_total "
              "counts them all")
    print(f"unrouted events: {result.unrouted}")
    print(alive_line(result))
    served = served_line(result)
    if served is not None:
        print(served)
    if waits is not None and waits.waiting:
        print(f"publishers waiting for a key: {waits.waiting} (longest "
              f"{format_age(waits.longest_wait_seconds)}, behind a transaction open for "
              f"{format_age(waits.oldest_holder_seconds)})")
    if holder is not None:
        common.print_line(describe_horizon(holder))


def _bound(e: admin.EndpointStatus) -> str:
    """Undelivered against the --max-pending bound, as a percentage of it; "-" if none."""
    if e.max_pending is None:
        return "-"
    undelivered = e.pending + e.in_flight
    return f"{undelivered}/{e.max_pending} ({100 * undelivered // e.max_pending}%)"
