"""Where the dispatcher's CPU goes at full load: a py-spy sample, per function and per stage.

    python benchmarks/hotpath.py [--events 60000] [--seconds 5] [--rate 200] [--top 15]
                                 [--max-in-flight 64] [--event-loop asyncio|uvloop]
                                 [--flamegraph docs/images/hotpath.svg] [--tenants N]

The set-up of ``throughput.py`` (one throwaway PostgreSQL with fsync on, the
lean local receiver, one endpoint, one event per request): a backlog is
published, the dispatcher starts draining it, and once 2,000 events have
arrived py-spy samples the dispatcher for ``--seconds``. Prints two tables
of the busiest functions: "self" (samples where the function itself was
running) and "total" (samples where it was anywhere on the stack), each as a
share of the samples taken while the process was on a CPU (idle samples
dropped). Then the stage budget: the dispatcher's CPU per event over the
same seconds (user + system, from /proc), split among the stages of the hot
path by the share of busy samples whose stack matches each stage's frames
(``STAGES``, first match wins): the claim statement, its rows' decoding, the
turn walk, request building and signing, HTTP write and parse, the
completion statement, metrics, logs, the event loop itself, the rest.
``--flamegraph PATH`` samples as long again and writes py-spy's flame graph
(SVG) there. ``--tenants N`` spreads the backlog over N tenants in turn, so
that each claim deals its requests in rounds between them. Needs py-spy
(``pip install -e '.[bench]'``); as a normal user, ``kernel.yama.ptrace_scope``
may have to be 0.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

import outbox
from outbox.migrate import migrate
from outbox.testing import Receiver, TemporaryPostgres

sys.path.insert(0, str(Path(__file__).parent))
import guard_side  # the backlog's events, spread over tenants as the guard's are
import throughput  # the shared set-up: receiver, dispatcher start and stop

FRAME = re.compile(r"^(?P<name>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")
IDLE = ("select (selectors.py", "_run_once (asyncio", "run_forever (", "poll (", "epoll")
# For the stage budget only the waits are idle: the loop's own turns are a stage of their own.
WAITING = ("select (selectors.py", "poll (", "epoll")


def short(frame: str) -> str:
    """``name (path/to/file.py:12)`` as ``file.py:name``: lines differ, functions add up."""
    match = FRAME.match(frame)
    if match is None:
        return frame
    return f"{Path(match['file']).name}:{match['name']}"


def summarise(raw: Path, top: int) -> str:
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [short(f) for f in stack.split(";")]
        if any(marker in stack.rsplit(";", 1)[-1] for marker in IDLE):
            continue  # waiting for I/O, not spending CPU
        samples = int(count)
        total += samples
        own[frames[-1]] += samples
        for name in set(frames):
            anywhere[name] += samples
    lines = [f"{total} busy samples"]
    for title, counter in (("self", own), ("total", anywhere)):
        lines.append(f"\n{title:>6}  function")
        # Frames on every stack (the interpreter's entry, the loop's run) say nothing.
        ranked = [(n, c) for n, c in counter.most_common() if title == "self" or c < total]
        for name, samples in ranked[:top]:
            lines.append(f"{samples / max(total, 1):6.1%}  {name}")
    return "\n".join(lines)


# The hot path's stages, each a test of a sample's whole stack (frames as py-spy writes
# them, ``function (path/file.py:line)``); the first that matches names the stage.
STAGES: tuple[tuple[str, Callable[[str, str], bool]], ...] = (
    ("logs", lambda stack, _: "logging/__init__.py" in stack or "observe/logs.py" in stack
     or "attempt_log.py" in stack),
    ("metrics", lambda stack, _: "prometheus_client" in stack or "observe/metrics.py" in stack
     or "observe/tracing.py" in stack or "opentelemetry" in stack),
    ("turn walk", lambda stack, _: "limits/walk.py" in stack or "limits/turns.py" in stack
     or "_due_endpoints (" in stack or "limits/quota.py" in stack),
    ("row decoding", lambda stack, leaf: "claimer.py" in stack and (
        "psycopg/rows.py" in stack or "fetch" in leaf or "load" in leaf
        or "policy/model.py" in stack or "_group (" in stack)),
    ("claim statement", lambda stack, _: "claimer.py" in stack and (
        "dispatcher/db.py" in stack or "psycopg" in stack)),
    ("completion statement", lambda stack, _: "completer.py" in stack or "leases.py" in stack),
    ("request building and signing", lambda stack, _: "policy/envelope.py" in stack
     or "hmac.py" in stack or "_request_start" in stack or "json/encoder.py" in stack
     or "/wire.py" in stack),
    ("HTTP write and parse", lambda stack, _: "dispatcher/http/" in stack
     or "httptools" in stack or "_SelectorSocketTransport" in stack),
    ("delivery bookkeeping", lambda stack, _: "dispatcher/" in stack),
    ("event loop", lambda stack, _: "asyncio/" in stack or "selectors.py" in stack
     or "uvloop" in stack),
)


def stage_of(stack: str) -> str:
    """The stage a sample's stack (frames joined by ``;``, outermost first) belongs to.

    Only the frames of the callback the loop is running count (after asyncio's
    ``Handle._run``): the frames below it, the process's entry and the loop's
    turn, are on every stack; a sample outside any callback is the loop's own.
    """
    frames = stack.split(";")
    runs = [i for i, frame in enumerate(frames)
            if frame.split(" (", 1)[0].endswith("_run") and "asyncio/events.py" in frame]
    if runs:
        frames = frames[runs[-1] + 1:]
    elif any("asyncio/base_events.py" in frame for frame in frames):
        frames = []  # in the loop's turn, between callbacks
    inner = ";".join(frames)
    if not inner:
        return "event loop"
    for name, matches in STAGES:
        if matches(inner, frames[-1]):
            return name
    return "other (interpreter, libraries)"


def budget(raw: Path, cpu_ms_per_event: float) -> str:
    """Busy samples per stage, as shares and as CPU microseconds per event."""
    stages: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        if any(marker in stack.rsplit(";", 1)[-1] for marker in WAITING):
            continue
        stages[stage_of(stack)] += int(count)
    total = max(sum(stages.values()), 1)
    lines = [f"\nstage budget: {cpu_ms_per_event * 1000:.1f} us CPU per event in all",
             f"{'stage':<32} {'share':>6} {'us/event':>9}"]
    order = [name for name, _ in STAGES] + ["other (interpreter, libraries)"]
    for name in order:
        share = stages[name] / total
        lines.append(f"{name:<32} {share:6.1%} {share * cpu_ms_per_event * 1000:9.1f}")
    return "\n".join(lines)


def tidy(svg: Path) -> None:
    """The flame graph's file names relative to this tree and to the interpreter's library,
    so that it reads the same whichever checkout and machine made it."""
    text = svg.read_text()
    root = str(Path(__file__).resolve().parent.parent) + "/"
    for prefix in sorted({*sysconfig.get_paths().values(), sys.prefix}, key=len, reverse=True):
        text = text.replace(prefix + "/", "")
    svg.write_text(text.replace(root, ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--flamegraph", type=Path, metavar="SVG",
                        help="also sample --seconds more into a flame graph written here")
    parser.add_argument("--raw", type=Path, metavar="FILE",
                        help="keep the samples (py-spy's collapsed stacks) in FILE")
    parser.add_argument("--tenants", type=int, default=0,
                        help="spread the backlog over N tenants in turn (0: none)")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("hotpath: py-spy is not installed (pip install py-spy)")
    if args.event_loop == "uvloop":
        throughput.use_uvloop()
    arrivals = throughput.Arrivals()
    with (TemporaryPostgres(fsync=True, tmpfs=False) as pg,
          Receiver(arrivals, record=False) as rx, tempfile.TemporaryDirectory() as tmp):
        with psycopg.connect(pg.dsn) as conn:
            migrate(conn)
            conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) "
                         "VALUES ('bench', %s, %s)", (rx.url, args.max_in_flight))
            conn.commit()
            for start in range(0, args.events, 5000):
                outbox.publish_many(conn, [guard_side.event(i, args.tenants)
                                           for i in range(start, min(args.events, start + 5000))])
                conn.commit()
        proc = throughput.start_dispatcher(pg.dsn)
        raw = Path(tmp) / "profile.txt"
        try:
            while arrivals.count < 2000:
                if proc.poll() is not None:
                    sys.exit("hotpath: the dispatcher exited")
                time.sleep(0.01)
            before, cpu_before = arrivals.count, throughput.cpu_seconds(proc.pid)
            subprocess.run([spy, "record", "--format", "raw", "-o", str(raw), "-r",
                            str(args.rate), "-d", str(args.seconds), "-p", str(proc.pid)],
                           check=True, stdout=subprocess.DEVNULL)
            delivered = arrivals.count - before
            cpu_ms = (throughput.cpu_seconds(proc.pid) - cpu_before) / max(delivered, 1) * 1000
            if args.flamegraph is not None:
                args.flamegraph.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run([spy, "record", "--format", "flamegraph", "-o",
                                str(args.flamegraph), "-r", str(args.rate), "-d",
                                str(args.seconds), "-p", str(proc.pid)],
                               check=True, stdout=subprocess.DEVNULL)
                tidy(args.flamegraph)
        finally:
            throughput.stop(proc)
        if arrivals.count >= args.events:
            print("hotpath: the backlog ran out while sampling; raise --events", file=sys.stderr)
        print(f"{delivered} events delivered while sampling ({args.event_loop})")
        print(summarise(raw, args.top))
        print(budget(raw, cpu_ms))
        if args.raw is not None:
            shutil.copyfile(raw, args.raw)
        print(f"\n(the dispatcher's CPU while sampled, py-spy's pauses included; "
              f"load average {os.getloadavg()[0]:.2f})")
        if args.flamegraph is not None:
            print(f"flame graph: {args.flamegraph}")


if __name__ == "__main__":
    main()
