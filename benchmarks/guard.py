"""The release guard: this tree against another commit, the same benchmarks in alternating runs.

    ./dev bench --against REF [--pairs 3] [--events 20000] [--samples 60]
                              [--seeds-events 1000] [--no-peer] [--quick] [--tree REF2]

REF is a git ref or tag (``f3bb187``, ``main``, ``v1.4.0``). Its tree is
exported (``git archive``) into ``.bench/trees/SHA`` and installed, with the
extras it has among ``dispatcher`` and ``binary``, into a virtual
environment of its own, ``.bench/venvs/SHA``; both are kept, so a second run
against the same commit starts at once. This tree runs from its own
``.venv`` (``./dev``'s, editable: uncommitted changes count); ``--tree REF2``
measures another commit in its place, installed as REF is, to bisect a change.

One throwaway PostgreSQL (fsync on, data on disk) and one lean receiver
(``throughput.Arrivals``, which answers ``GET /stats`` and ``GET /reset``)
serve every run; each run gets a fresh database. Each pair measures, the
two trees in alternating order (this tree first in odd pairs):

* one event per request: events/s draining ``--events``, the dispatcher's
  CPU per event, wall and CPU seconds of the drain;
* idle latency: commit to arrival, one event per transaction, p50 and p99;
* 100 events per request: events/s, against the seeds' loop (one row per
  transaction, ``throughput.baseline``) run in the same pair;
* 4 dispatchers against 1, both draining ``--events`` one per request;
* pg-boss 12 (``shared/peers/pgboss``, copied to ``.bench/pgboss`` and
  ``npm install``-ed once) draining ``--events`` with 64 requests in flight
  into the same receiver, on the same server: skipped, with a note, where
  Node.js or npm is missing.

The drivers (``guard_side.py``, reusing ``fleet.py``'s start and readiness)
are this tree's files, run by each tree's Python from that tree's folder, so
that each tree publishes into its own schema. Prints the medians of the
pairs side by side with the ratio this tree / REF, and the load average
before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # the receiver, the seeds' loop

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".bench"
PEER = ROOT.parent / "shared" / "peers" / "pgboss"
EXTRAS = ("dispatcher", "binary")
PEER_CONCURRENCY = 64  # the dispatcher's default --concurrency


class GuardError(Exception):
    """A run-time failure, told in one line."""


class BadRef(GuardError):
    """REF names no commit: bad usage."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The guard's options; ``--quick`` shrinks every count to a smoke run of one pair."""
    parser = argparse.ArgumentParser(
        prog="./dev bench",
        description="This tree against REF: the same benchmarks in alternating runs, "
        "medians side by side.")
    parser.add_argument("--against", required=True, metavar="REF",
                        help="a git ref or tag to compare with (f3bb187, main, a release)")
    parser.add_argument("--pairs", type=_positive, default=3,
                        help="alternating pairs of runs (default 3)")
    parser.add_argument("--events", type=_positive, default=20000,
                        help="events per drain (default 20,000)")
    parser.add_argument("--samples", type=_positive, default=60,
                        help="idle latency samples per run (default 60)")
    parser.add_argument("--seeds-events", type=_positive, default=1000,
                        help="events of the seeds' loop per pair (default 1,000)")
    parser.add_argument("--tree", metavar="REF2",
                        help="measure another commit in place of this tree, installed as REF "
                        "is (to bisect: --tree COMMIT --against f3bb187)")
    parser.add_argument("--no-peer", action="store_true", help="leave pg-boss out")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: one pair, 2,000 events, 10 samples, 200 seeds' events")
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.events, args.samples, args.seeds_events = 1, 2000, 10, 200
    return args


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


# --- the trees and their environments ---------------------------------------------------

@dataclass(frozen=True)
class Tree:
    """A tree under test: its label, folder and Python."""

    label: str
    folder: Path
    python: Path


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise GuardError(f"git {' '.join(args)}: {last_words(done.stderr)}")
    return done.stdout.strip()


def extras_of(pyproject: Path) -> list[str]:
    """Which of the extras the guard installs this tree declares (older trees lack some)."""
    declared = tomllib.loads(pyproject.read_text()).get("project", {}).get(
        "optional-dependencies", {})
    return [name for name in EXTRAS if name in declared]


def install_ref(ref: str) -> Tree:
    """REF exported and installed once per commit; the cached copy afterwards."""
    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GuardError:
        raise BadRef(f"--against {ref}: not a commit of this repository") from None
    folder, venv = CACHE / "trees" / sha[:12], CACHE / "venvs" / sha[:12]
    stamp = venv / ".installed"
    if not stamp.exists():
        print(f"installing {ref} ({sha[:12]}) into {venv.relative_to(ROOT)} ...", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
        folder.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        extras = extras_of(folder / "pyproject.toml")
        target = f"{folder}[{','.join(extras)}]" if extras else str(folder)
        pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", target],
                             capture_output=True, text=True, check=False)
        if pip.returncode != 0:
            raise GuardError(f"pip install of {ref} failed: "
                             f"{last_words(pip.stderr)}")
        stamp.write_text(sha + "\n")
    return Tree(f"{ref} ({sha[:7]})" if not sha.startswith(ref) else sha[:7], folder,
                venv / "bin" / "python")


def this_tree() -> Tree:
    head = git("rev-parse", "--short=7", "HEAD")
    dirty = "+changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return Tree(f"this ({head}{dirty})", ROOT, Path(sys.executable))


def last_words(stderr: str) -> str:
    """The line of a failed command's error output that names the error (not a stack frame)."""
    lines = [line.strip() for line in stderr.splitlines()
             if line.strip() and not line.strip().startswith(("at ", "File ", "Node.js v"))]
    named = [line for line in lines if "Error" in line or "error" in line]
    return (named or lines or ["no output"])[-1]


def side_env() -> dict[str, str]:
    """This process's environment without what would point a tree at another's packages."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


# --- the runs ----------------------------------------------------------------------------

class Server:
    """The run's PostgreSQL: a fresh database for every run."""

    def __init__(self, pg: Any) -> None:
        self.pg = pg  # a TemporaryPostgres: its URLs suit Node.js's driver too
        self.dsn = pg.dsn
        self.made = 0

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        self.made += 1
        name = f"guard_{self.made}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # a name made here, never input
        try:
            yield str(self.pg.dsn_for(name))
        finally:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def side(tree: Tree, server: Server, url: str, task: str, *options: str) -> dict[str, Any]:
    """One ``guard_side.py`` run of ``tree`` on a fresh database: its JSON answer."""
    with server.database() as dsn:
        done = subprocess.run(
            [str(tree.python), str(ROOT / "benchmarks" / "guard_side.py"), task, "--dsn", dsn,
             "--url", url, *options], cwd=tree.folder, env=side_env(), capture_output=True,
            text=True, check=False, timeout=1200)
    if done.returncode != 0:
        raise GuardError(f"{tree.label}: {task} {' '.join(options)} failed: "
                         f"{last_words(done.stderr)}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def measure(tree: Tree, server: Server, url: str, args: argparse.Namespace,
            seeds_rate: float) -> dict[str, float]:
    """One run of every figure for ``tree``."""
    n = str(args.events)
    one = side(tree, server, url, "drain", "--events", n)
    idle = side(tree, server, url, "idle", "--samples", str(args.samples))
    batch = side(tree, server, url, "drain", "--events", n, "--max-batch", "100")
    four = side(tree, server, url, "drain", "--events", n, "--dispatchers", "4")
    rate = (one["events"] - 1) / one["seconds"]
    batch_rate = (batch["events"] - 1) / batch["seconds"]
    return {
        "rate": rate,
        "cpu_ms": one["cpu"] / one["events"] * 1000,
        "wall_s": one["seconds"],
        "cpu_s": one["cpu"],
        "statements": one["statements"] / one["events"],
        "idle_p50": percentile(idle["latencies"], 0.5) * 1000,
        "idle_p99": percentile(idle["latencies"], 0.99) * 1000,
        "batch_rate": batch_rate,
        "batch_cpu_ms": batch["cpu"] / batch["events"] * 1000,
        "batch_vs_seeds": batch_rate / seeds_rate,
        "four_vs_one": (four["events"] - 1) / four["seconds"] / rate,
        "four_cpu_ms": four["cpu"] / four["events"] * 1000,
    }


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Peer:
    """pg-boss, installed once into the cache; ``note`` says why it is not, where it is not."""

    node: Path | None = None
    folder: Path = field(default_factory=lambda: CACHE / "pgboss")
    note: str = ""

    @classmethod
    def find(cls) -> Peer:
        if not (PEER / "peer.mjs").exists():
            return cls(note=f"pg-boss skipped: {PEER} is missing")
        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None:
            return cls(note="pg-boss skipped: Node.js or npm is not installed")
        peer = cls()
        if not (peer.folder / "node_modules" / "pg-boss").exists():
            print("installing pg-boss into .bench/pgboss (npm install) ...", flush=True)
            peer.folder.mkdir(parents=True, exist_ok=True)
            for name in ("package.json", "package-lock.json", "peer.mjs", "README.md"):
                if (PEER / name).exists():
                    shutil.copy2(PEER / name, peer.folder / name)
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=peer.folder,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                return cls(note="pg-boss skipped: npm install failed: "
                           f"{last_words(done.stderr)}")
        bundled = peer.folder / "node_modules" / ".bin" / "node"  # Node 22, where it installed
        peer.node = bundled if bundled.exists() else Path(node)
        return peer

    def run(self, server: Server, url: str, events: int) -> float:
        assert self.node is not None
        with server.database() as dsn:
            reset_receiver(url)
            done = subprocess.run([str(self.node), "peer.mjs", dsn, url, str(events),
                                   str(PEER_CONCURRENCY)], cwd=self.folder, capture_output=True,
                                  text=True, check=False, timeout=1200)
        if done.returncode != 0:
            raise GuardError(f"pg-boss failed: {last_words(done.stderr)}")
        return float(json.loads(done.stdout.strip().splitlines()[-1])["events_per_s"])


def reset_receiver(url: str) -> None:
    """The receiver's counts cleared, as the peer expects them before it starts."""
    with urllib.request.urlopen(url.rstrip("/") + "/reset", timeout=10):
        pass


# --- the table ---------------------------------------------------------------------------

# (key, label, format, whether the ratio is shown)
FIGURES: tuple[tuple[str, str, str, bool], ...] = (
    ("rate", "events/s, 1 event per request", "{:,.0f}", True),
    ("cpu_ms", "  dispatcher CPU ms per event", "{:.3f}", True),
    ("wall_s", "  drain wall s", "{:.2f}", True),
    ("cpu_s", "  drain CPU s", "{:.2f}", True),
    ("statements", "  statements per event", "{:.3f}", True),
    ("vs_pgboss", "  vs pg-boss, same run", "{:.2f}x", True),
    ("idle_p50", "idle latency p50 ms", "{:.2f}", True),
    ("idle_p99", "idle latency p99 ms", "{:.2f}", True),
    ("batch_rate", "events/s, 100 events per request", "{:,.0f}", True),
    ("batch_cpu_ms", "  dispatcher CPU ms per event", "{:.4f}", True),
    ("batch_vs_seeds", "  vs the seeds' loop", "{:.1f}x", True),
    ("four_vs_one", "4 dispatchers vs 1, events/s", "{:.2f}x", True),
    ("four_cpu_ms", "  4 dispatchers' CPU ms per event", "{:.3f}", True),
)


def medians(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per figure, the median over the runs that have it."""
    keys = {key for run in runs for key in run}
    return {key: statistics.median(run[key] for run in runs if key in run) for key in keys}


def pair_ratios(ours: Sequence[dict[str, float]],
                theirs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per figure, the median of this / REF within each pair: the two trees of a pair ran
    minutes apart, so the machine's other load weighs on both alike."""
    found: dict[str, list[float]] = {}
    for mine, other in zip(ours, theirs, strict=True):
        for key, value in mine.items():
            if other.get(key):
                found.setdefault(key, []).append(value / other[key])
    return {key: statistics.median(values) for key, values in found.items()}


def table(ours: dict[str, float], theirs: dict[str, float], ratios: dict[str, float],
          labels: tuple[str, str], peers: dict[str, float] | None = None) -> str:
    """Medians side by side, with the median of the pairs' this / REF; figures either side
    lacks are left out."""
    head = ("figure", labels[0], labels[1], "this / REF")
    rows = [head]
    for key, label, fmt, ratio in FIGURES:
        if key not in ours or key not in theirs:
            continue
        share = f"{ratios[key]:.2f}" if ratio and key in ratios else ""
        rows.append((label, fmt.format(ours[key]), fmt.format(theirs[key]), share))
    for label, value in (peers or {}).items():
        rows.append((label, f"{value:,.0f}", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [f"{row[0]:<{widths[0]}}  " + "  ".join(f"{cell:>{w}}" for cell, w in
                                                    zip(row[1:], widths[1:], strict=True))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min), {os.cpu_count()} CPUs"


def run(args: argparse.Namespace) -> None:
    from outbox.testing import Receiver, TemporaryPostgres

    theirs = install_ref(args.against)
    ours = install_ref(args.tree) if args.tree else this_tree()
    peer = Peer() if args.no_peer else Peer.find()
    if args.no_peer:
        peer.note = "pg-boss left out (--no-peer)"
    print(f"{ours.label} against {theirs.label}: {args.pairs} pairs, {args.events:,} events "
          f"per drain; {load()}", flush=True)
    if peer.note:
        print(peer.note, flush=True)
    results: dict[str, list[dict[str, float]]] = {"ours": [], "theirs": []}
    peer_rates: list[float] = []
    arrivals = throughput.Arrivals()
    with (TemporaryPostgres(fsync=True, tmpfs=False) as pg,
          Receiver(arrivals, record=False) as rx):
        server = Server(pg)
        for pair in range(1, args.pairs + 1):
            with server.database() as dsn:
                seeds = throughput.baseline(dsn, rx.url, args.seeds_events)
            order = ("ours", "theirs") if pair % 2 else ("theirs", "ours")
            for name in order:
                tree = ours if name == "ours" else theirs
                results[name].append(measure(tree, server, rx.url, args, seeds))
            if peer.node is not None:
                try:
                    peer_rates.append(peer.run(server, rx.url, args.events))
                except GuardError as error:  # the guard's own figures stand without it
                    peer.node, peer.note = None, f"pg-boss skipped from pair {pair} on: {error}"
                    print(peer.note, flush=True)
            if peer_rates and len(peer_rates) == pair:
                for name in order:
                    results[name][-1]["vs_pgboss"] = results[name][-1]["rate"] / peer_rates[-1]
            print(f"pair {pair}: " + "   ".join(
                f"{(ours if n == 'ours' else theirs).label} {results[n][-1]['rate']:,.0f} ev/s "
                f"({results[n][-1]['cpu_ms']:.3f} ms CPU)" for n in order)
                + (f"   pg-boss {peer_rates[-1]:,.0f} ev/s" if peer_rates else "")
                + f"   seeds' loop {seeds:,.0f} ev/s", flush=True)
    print()
    peers = {"pg-boss 12 events/s, same run": statistics.median(peer_rates)} if peer_rates else {}
    print(table(medians(results["ours"]), medians(results["theirs"]),
                pair_ratios(results["ours"], results["theirs"]), (ours.label, theirs.label),
                peers))
    print(f"\nmedians of {args.pairs} pairs (this / REF: the median of the pairs' ratios); "
          f"{load()} at the end")
    if peer.note:
        print(peer.note)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except GuardError as error:
        print(f"bench --against: {error}", file=sys.stderr)
        return 2 if isinstance(error, BadRef) else 1
    except subprocess.TimeoutExpired as error:
        print(f"bench --against: {Path(str(error.cmd[1])).name} ran past {error.timeout:.0f} s",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
