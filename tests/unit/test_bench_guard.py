"""benchmarks/guard.py (``./dev bench --against REF``): its options, extras and side-by-side table.

The guard's runs themselves are benchmarks, timed on the machine at hand: nothing here times
anything; these checks need nothing but the module.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def guard() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("bench_guard", BENCHMARKS / "guard.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_defaults_are_three_pairs_of_twenty_thousand_events(guard: ModuleType) -> None:
    """Without options the guard runs three alternating pairs of 20,000-event drains, pg-boss in."""
    args = guard.parse_args(["--against", "f3bb187"])
    assert (args.against, args.pairs, args.events, args.no_peer) == ("f3bb187", 3, 20000, False)
    assert args.tree is None  # this tree, as it stands, against REF


def test_quick_is_one_short_pair(guard: ModuleType) -> None:
    """--quick shrinks the run to one pair of small counts, whatever else was asked."""
    args = guard.parse_args(["--against", "main", "--quick", "--pairs", "5"])
    assert (args.pairs, args.events, args.samples, args.seeds_events) == (1, 2000, 10, 200)


@pytest.mark.parametrize("argv", [[], ["--against", "main", "--pairs", "0"],
                                  ["--against", "main", "--events", "many"]])
def test_bad_usage_exits_2(guard: ModuleType, argv: list[str],
                           capsys: pytest.CaptureFixture[str]) -> None:
    """A missing REF or a count that is not a positive number is bad usage: exit 2, one message."""
    with pytest.raises(SystemExit) as exited:
        guard.parse_args(argv)
    assert exited.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_extras_installed_are_those_the_tree_declares(guard: ModuleType, tmp_path: Path) -> None:
    """An older tree without the dispatcher's extra is installed with the extras it has."""
    old = tmp_path / "pyproject.toml"
    old.write_text('[project]\nname = "x"\n[project.optional-dependencies]\n'
                   'binary = ["psycopg[binary]"]\ntest = ["pytest"]\n')
    assert guard.extras_of(old) == ["binary"]
    old.write_text('[project]\nname = "x"\n')
    assert guard.extras_of(old) == []


def test_medians_per_figure_over_the_runs_that_have_it(guard: ModuleType) -> None:
    """Each figure's median is over the pairs that measured it (a peer may drop out midway)."""
    runs = [{"rate": 10.0, "vs_pgboss": 2.0}, {"rate": 30.0}, {"rate": 20.0, "vs_pgboss": 4.0}]
    assert guard.medians(runs) == {"rate": 20.0, "vs_pgboss": 3.0}


def test_table_sets_medians_side_by_side_with_the_ratio(guard: ModuleType) -> None:
    """The table has one row per figure both trees measured: this tree, REF, and this / REF."""
    ours = {"rate": 7520.0, "cpu_ms": 0.097, "idle_p50": 6.1}
    theirs = {"rate": 10125.0, "cpu_ms": 0.082}
    ratios = {"rate": 0.74, "cpu_ms": 1.18}
    text = guard.table(ours, theirs, ratios, ("this (abc1234)", "f3bb187"),
                       {"pg-boss 12 events/s, same run": 6480.0})
    lines = text.splitlines()
    assert lines[0].split() == ["figure", "this", "(abc1234)", "f3bb187", "this", "/", "REF"]
    assert set(lines[1]) == {"-"}
    assert lines[2].split()[-3:] == ["7,520", "10,125", "0.74"]
    assert lines[3].split()[-3:] == ["0.097", "0.082", "1.18"]
    assert not any("idle" in line for line in lines)  # REF lacks it: no row
    assert lines[-1].split()[-1] == "6,480"
    assert len({len(line.rstrip()) for line in lines[:4]}) == 1  # columns aligned


def test_ratio_is_the_median_of_the_pairs_ratios(guard: ModuleType) -> None:
    """this / REF is taken within each pair, then the median: a busy pair moves both sides."""
    ours = [{"rate": 3000.0}, {"rate": 4500.0}, {"rate": 2500.0, "idle_p50": 1.0}]
    theirs = [{"rate": 5000.0}, {"rate": 3000.0}, {"rate": 9000.0}]
    assert guard.pair_ratios(ours, theirs) == {"rate": 0.6}


def test_pgboss_is_left_out_with_a_note_without_node(guard: ModuleType, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Node.js or npm on PATH the peer is skipped, saying why, and nothing installed."""
    (tmp_path / "peer.mjs").write_text("")
    monkeypatch.setattr(guard, "PEER", tmp_path)
    monkeypatch.setattr(guard.shutil, "which", lambda _name: None)
    peer = guard.Peer.find()
    assert peer.node is None
    assert peer.note == "pg-boss skipped: Node.js or npm is not installed"
    monkeypatch.setattr(guard, "PEER", tmp_path / "absent")
    assert guard.Peer.find().note.startswith("pg-boss skipped: ")


def test_last_words_name_the_error_not_the_stack(guard: ModuleType) -> None:
    """A failed run is told by its error line, not by a stack frame or the runtime's version."""
    stderr = ("file.js:45\n    Error.captureStackTrace(err)\nError: connect ECONNREFUSED\n"
              "    at Socket.x (node:net:1)\n}\n\nNode.js v22.23.5\n")
    assert guard.last_words(stderr) == "Error: connect ECONNREFUSED"
    assert guard.last_words("") == "no output"


def test_an_unknown_ref_is_bad_usage(guard: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """A REF that names no commit exits 2 with one line, before anything is installed."""
    assert guard.main(["--against", "no-such-ref-anywhere"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("bench --against: --against no-such-ref-anywhere: "
                           "not a commit of this repository")
