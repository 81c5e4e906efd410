"""Where the dispatcher's CPU goes at full load: a py-spy sample, summed per function.

    python benchmarks/hotpath.py [--events 60000] [--seconds 5] [--rate 200] [--top 15]
                                 [--max-in-flight 64] [--event-loop asyncio|uvloop]

The set-up of ``throughput.py`` (one throwaway PostgreSQL with fsync on, the
lean local receiver, one endpoint, one event per request): a backlog is
published, the dispatcher starts draining it, and once 2,000 events have
arrived py-spy samples the dispatcher for ``--seconds``. Prints two tables
of the busiest functions: "self" (samples where the function itself was
running) and "total" (samples where it was anywhere on the stack), each as a
share of the samples taken while the process was on a CPU (idle samples
dropped). Needs py-spy (``pip install py-spy``); as a normal user,
``kernel.yama.ptrace_scope`` may have to be 0.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

import outbox
from outbox.migrate import migrate
from outbox.testing import Receiver, TemporaryPostgres

sys.path.insert(0, str(Path(__file__).parent))
import throughput  # the shared set-up: receiver, dispatcher start and stop

FRAME = re.compile(r"^(?P<name>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")
IDLE = ("select (selectors.py", "_run_once (asyncio", "run_forever (", "poll (", "epoll")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio")
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
                outbox.publish_many(conn, [outbox.Event("bench.event", {"n": i})
                                           for i in range(start, min(args.events, start + 5000))])
                conn.commit()
        proc = throughput.start_dispatcher(pg.dsn)
        raw = Path(tmp) / "profile.txt"
        try:
            while arrivals.count < 2000:
                if proc.poll() is not None:
                    sys.exit("hotpath: the dispatcher exited")
                time.sleep(0.01)
            before = arrivals.count
            subprocess.run([spy, "record", "--format", "raw", "-o", str(raw), "-r",
                            str(args.rate), "-d", str(args.seconds), "-p", str(proc.pid)],
                           check=True, stdout=subprocess.DEVNULL)
            delivered = arrivals.count - before
        finally:
            throughput.stop(proc)
        if arrivals.count >= args.events:
            print("hotpath: the backlog ran out while sampling; raise --events", file=sys.stderr)
        print(f"{delivered} events delivered while sampling ({args.event_loop})")
        print(summarise(raw, args.top))


if __name__ == "__main__":
    main()
