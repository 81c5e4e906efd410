"""Log lines that a fault repeats thousands of times a second, said once a while instead.

Out of file descriptors, every accept of the metrics server and every
delivery fails the same way: one line per failure once made 2.3 MB of log in
ten seconds. A :class:`Throttled` logs the first, then at most one line per
``interval`` seconds, saying how many were left out meanwhile.
"""

from __future__ import annotations

import logging
import time
from typing import Any


class Throttled:
    """``Throttled(60).warning(log, "msg %s", arg)``: the first, then one a minute."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.suppressed = 0
        self._last: float | None = None

    def due(self) -> int | None:
        """The count left out since the last line when one may be logged now, else None."""
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval:
            self.suppressed += 1
            return None
        self._last = now
        left_out, self.suppressed = self.suppressed, 0
        return left_out

    def warning(self, log: logging.Logger, message: str, *args: Any) -> None:
        left_out = self.due()
        if left_out is None:
            return
        if left_out:
            message += f" ({left_out} more like it in the last {self.interval:g} s)"
        log.warning(message, *args)
