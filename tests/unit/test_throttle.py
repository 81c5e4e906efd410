"""Log lines a fault repeats: the first, then one per interval with the count left out."""

from __future__ import annotations

import logging

import pytest

from dispatcher.observe import throttle
from dispatcher.observe.throttle import Throttled


def test_first_line_then_one_per_interval_with_the_count(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """1,000 reports in a second make one line; the next after the interval says 999 more."""
    now = [100.0]
    monkeypatch.setattr(throttle.time, "monotonic", lambda: now[0])
    log = logging.getLogger("test.throttle")
    limited = Throttled(60.0)
    with caplog.at_level(logging.WARNING, logger="test.throttle"):
        for _ in range(1000):
            limited.warning(log, "out of %s", "files")
            now[0] += 0.001
        now[0] += 60.0
        limited.warning(log, "out of %s", "files")
    assert [r.getMessage() for r in caplog.records] == [
        "out of files", "out of files (999 more like it in the last 60 s)"]
