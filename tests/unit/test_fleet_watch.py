"""An idle database is watched: looked at again one sweep after its last look, at the latest."""

from __future__ import annotations

from dispatcher.many.watch import MARGIN, Watcher, next_look


def test_an_idle_database_is_looked_at_again_one_sweep_after_its_look_began() -> None:
    """With nothing due, the next look comes one sweep after the last one began: a
    measurement never older than the sweep, one connection per sweep."""
    for began in (0.0, 100.0, 1234.5):
        assert next_look(began + 0.03, began, None, 60.0, first=False) == began + 60.0


def test_a_first_look_spreads_over_the_sweep_and_a_due_retry_comes_sooner() -> None:
    """A database's first look waits a random part of the sweep (looks spread); a retry
    due sooner than the sweep brings the look forward; the sweep off leaves only it."""
    firsts = {next_look(10.0, 10.0, None, 60.0, first=True) for _ in range(200)}
    assert min(firsts) >= 40.0
    assert max(firsts) <= 70.0
    assert len(firsts) > 100
    assert next_look(10.5, 10.0, 5.0, 60.0, first=False) == 15.5
    assert next_look(10.5, 10.0, 500.0, 60.0, first=False) == 70.0
    assert next_look(10.5, 10.0, None, 0.0, first=False) == float("inf")
    assert next_look(10.5, 10.0, 5.0, 0.0, first=False) == 15.5


def test_a_looks_row_vouches_for_the_database_past_the_next_look() -> None:
    """The row a look writes (served_by) lasts a sweep and a margin: the next look renews
    it before it lapses."""
    row = Watcher(every=60.0).row()
    assert row["seconds"] == 60.0 + MARGIN
    assert MARGIN > 0
    assert Watcher(every=60.0).me != Watcher(every=60.0).me
