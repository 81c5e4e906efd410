"""The suite run N times on clean clones, to find the tests that fail now and then.

    ./dev test-runs N [--busy K] [--keep] [-- PYTEST ARGS]

Each run clones the committed HEAD of this checkout into a new directory (what
is not committed is not tested) and runs pytest there with PYTEST ARGS (the
whole suite without them). One virtual environment, made once per call beside
the clones and installed from the first clone's path, serves every run: each
clone takes the same path in turn. With ``--busy K``, K processes spin
(``while 1: pass``) beside the runs, as a loaded machine would. It prints each
failure as it is found (the run, the test id and its message's first line)
and a summary: runs passed, and per test how often it failed. Exit 0 when
every run passed, 1 otherwise, 2 for bad usage. The logs of the runs stay in
the directory it names; ``--keep`` keeps the last clone and the environment
too.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
_SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
_COUNTS = re.compile(r"^=*\s*(\d+ \w+.* in [0-9.]+s(?: \([0-9:]+\))?)\s*=*$")


def positive(text: str) -> int:
    """An argument that must be a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def not_negative(text: str) -> int:
    """An argument that must be a whole number of at least 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 0, not {text!r}")
    return int(text)


def failures(log: str) -> list[tuple[str, str]]:
    """(test id, first line of its message) of each failure and error in pytest's short
    summary (``-rfE``)."""
    found = []
    for line in log.splitlines():
        if match := _SUMMARY_LINE.match(line.strip()):
            found.append((match[2], (match[3] or "").strip()))
    return found


def outcome(log: str) -> str:
    """pytest's last line of counts (``3 passed, 1 failed in 12.0s``), or what it lacks."""
    for line in reversed(log.splitlines()):
        if match := _COUNTS.search(line.strip()):
            return match[1]
    return "no summary (pytest did not finish)"


@contextmanager
def busy_loops(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` processes spinning on a core each while the block runs; killed after."""
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def clone(tree: Path) -> None:
    """A clean clone of this checkout's HEAD at ``tree`` (what was there goes first)."""
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "clone", "--quiet", str(HERE), str(tree)], check=True)


def make_venv(venv: Path, tree: Path, log: Path) -> None:
    """One environment for every run: the project installed (editable) from ``tree``;
    pip's output goes to ``log``."""
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    with log.open("w") as out:
        for command in ([sys.executable, "-m", "venv", str(venv)], [*pip, "--upgrade", "pip"],
                        [*pip, "-e", f"{tree}[test,demo]"]):
            if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT,
                              check=False).returncode:
                raise SystemExit(f"test-runs: could not make the environment; see {log}")


def run_once(venv: Path, tree: Path, pytest_args: Sequence[str], log: Path) -> str:
    """pytest in ``tree`` with the environment's Python, its output written to ``log``."""
    environ = {key: value for key, value in os.environ.items()
               if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    environ["PATH"] = f"{venv / 'bin'}:{environ.get('PATH', '')}"
    with log.open("w") as out:
        subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-rfE", *pytest_args],
                       cwd=tree, env=environ, stdout=out, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, check=False)
    return log.read_text(errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="./dev test-runs",
        description="Run the suite N times on clean clones of HEAD and report each failure.")
    parser.add_argument("runs", type=positive, help="how many runs")
    parser.add_argument("--busy", type=not_negative, default=0, metavar="K",
                        help="processes spinning beside the runs (default 0)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the last clone and the environment, not only the logs")
    parser.epilog = "Arguments after -- go to pytest (default: the whole suite)."
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    pytest_args = argv[cut + 1:]
    if shutil.which("git") is None:
        print("test-runs: git is not on PATH", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="outbox-test-runs-"))
    tree, venv = work / "tree", work / "venv"
    print(f"test-runs: {args.runs} runs of HEAD, {args.busy} busy loops beside them; "
          f"logs in {work}", flush=True)
    failed: Counter[str] = Counter()
    first_lines: dict[str, str] = {}
    passed_runs = 0
    try:
        with busy_loops(args.busy):
            for number in range(1, args.runs + 1):
                clone(tree)
                if not (venv / "bin" / "python").exists():
                    make_venv(venv, tree, work / "venv.log")
                started = time.monotonic()
                log = run_once(venv, tree, pytest_args, work / f"run-{number}.log")
                found = failures(log)
                summary = outcome(log)
                took = time.monotonic() - started
                print(f"run {number}: {summary} ({took:.0f}s wall)", flush=True)
                for test, line in found:
                    print(f"  {test}: {line}", flush=True)
                    failed[test] += 1
                    first_lines.setdefault(test, line)
                if not found and re.search(r"\bpassed\b", summary) \
                        and not re.search(r"\b(failed|error|errors)\b", summary):
                    passed_runs += 1
    finally:
        if not args.keep:
            shutil.rmtree(tree, ignore_errors=True)
            shutil.rmtree(venv, ignore_errors=True)
    print(f"\n{passed_runs} of {args.runs} runs passed")
    for test, times in failed.most_common():
        print(f"  failed in {times} of {args.runs} runs: {test}: {first_lines[test]}")
    return 0 if passed_runs == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
