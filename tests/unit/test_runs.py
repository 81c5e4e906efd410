"""``./dev test-runs`` (tests/runs.py): what it reads of pytest's output."""

from __future__ import annotations

from tests.runs import failures, outcome


def test_failures_are_read_from_the_short_summary_with_their_first_line() -> None:
    """Each FAILED or ERROR line gives its test id and its message's first line."""
    log = ("....F\n"
           "FAILED tests/acceptance/test_fleet.py::test_x - AssertionError: 11 requests\n"
           "ERROR tests/unit/test_y.py::test_z\n"
           "1 failed, 1 error, 3 passed in 2.01s\n")
    assert failures(log) == [("tests/acceptance/test_fleet.py::test_x",
                              "AssertionError: 11 requests"),
                             ("tests/unit/test_y.py::test_z", "")]


def test_the_outcome_is_pytests_last_line_of_counts_quiet_or_not() -> None:
    """``-q`` prints the counts bare, without it between rules; no counts: said so."""
    assert outcome("..\n11 passed in 0.64s\n") == "11 passed in 0.64s"
    assert outcome("== 2 failed, 9 passed in 147.83s (0:02:27) ==\n") == (
        "2 failed, 9 passed in 147.83s (0:02:27)")
    assert outcome("Traceback\n") == "no summary (pytest did not finish)"
