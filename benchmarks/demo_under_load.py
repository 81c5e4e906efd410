"""`outbox demo` again and again on a machine whose every core is busy with other work.

    python benchmarks/demo_under_load.py [--runs 20] [--events 1000] [--loops N]

Starts ``--loops`` busy loops (default twice the cores: pure Python
processes spinning, killed at the end), then runs ``outbox demo --events N``
``--runs`` times, one after the other, as a user would: a subprocess with no
database settings. Prints each run (exit code, seconds, how often the
circuit opened, per the demo's summary) and then the runs passed (exit 0 and
``result: OK``), the median and the longest run, and the circuit's openings
in all. The figures go to RELIABILITY.md with the command.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.busy import busy_loops, cores

_OUTBOX = Path(sys.executable).with_name("outbox")


def _openings(stdout: str) -> int | None:
    """How often the circuit opened, as the summary says; None without a summary."""
    if re.search(r"^\s+circuit\s+never opened", stdout, re.M):
        return 0
    match = re.search(r"^\s+circuit\s+opened (\d+) times?", stdout, re.M)
    return int(match.group(1)) if match else None


def run_once(events: int, timeout: float) -> tuple[int, float, int | None, bool]:
    """One demo: its exit code, seconds, the circuit's openings, and whether it said OK."""
    command = ([str(_OUTBOX)] if _OUTBOX.exists() else [sys.executable, "-m", "outbox.cli"])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PG", "OUTBOX_")) and k != "DATABASE_URL"}
    started = time.monotonic()
    try:
        done = subprocess.run([*command, "demo", "--events", str(events)],
                              capture_output=True, text=True, timeout=timeout, check=False,
                              env=env)
    except subprocess.TimeoutExpired:
        return -1, time.monotonic() - started, None, False
    seconds = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
    return (done.returncode, seconds, _openings(done.stdout),
            "result: OK" in done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--loops", type=int, default=2 * cores(),
                        help="busy loops beside the demo (default twice the cores)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one run may take before it counts as failed")
    args = parser.parse_args()
    print(f"{args.runs} runs of `outbox demo --events {args.events}` beside {args.loops} busy "
          f"loops on {cores()} cores (load average before: "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])})", flush=True)
    results = []
    with busy_loops(args.loops):
        for run in range(1, args.runs + 1):
            code, seconds, openings, ok = run_once(args.events, args.timeout)
            results.append((code, seconds, openings, ok))
            print(f"run {run:2}: exit {code}, {seconds:6.1f} s, circuit opened "
                  f"{'?' if openings is None else openings}", flush=True)
    passed = sum(1 for code, _, _, ok in results if code == 0 and ok)
    times = [seconds for _, seconds, _, _ in results]
    print()
    print(f"runs passed       {passed} of {len(results)}")
    print(f"time per run      median {statistics.median(times):.1f} s, "
          f"max {max(times):.1f} s")
    print(f"circuit opened    {sum(o or 0 for _, _, o, _ in results)} times in all, in "
          f"{sum(1 for _, _, o, _ in results if o)} of the runs")
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
