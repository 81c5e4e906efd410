"""The circuit breaker's window rule in plain Python: the rule itself, and a twin of the schema's.

:func:`rule_opens` is the rule as documented (docs/concepts.md, "The circuit
breaker"), over the attempts counted: at least N failed retryably and they
are at least R percent of them. :class:`StateRow` is a line-by-line twin of
``endpoint_state`` and the ``circuit_*_v2`` functions of schema.sql (six
buckets of a fifth of the window, on the epoch), so that a property test can
play attempt histories through it and the dispatcher's real
:class:`dispatcher.limits.circuit.Tally`, and the SQL functions can be
checked against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

BUCKETS = 6


def bucket(at: float, window: float) -> int:
    """The index of the bucket (a fifth of the window, on the epoch) ``at`` falls in."""
    return math.floor(at / (window / (BUCKETS - 1)))


def rule_opens(attempts: int, failures: int, breaker_failures: int, rate: float) -> bool:
    """The rule: N failures or more, and at least ``rate`` percent of the attempts."""
    return breaker_failures > 0 and failures >= breaker_failures and \
        failures * 100 >= rate * attempts


def shifted(counts: list[int], at: int | None, now: int) -> list[int]:
    """circuit_window_v2: the counts as they stand in bucket ``now``."""
    if at is None:
        return []
    return ([0] * min(BUCKETS, max(0, now - at)) + counts)[:BUCKETS]


def added(counts: list[int], others: list[int], newest: int) -> list[int]:
    """circuit_add_v2."""
    def at(values: list[int], i: int) -> int:
        return values[i] if i < len(values) else 0
    return [at(counts, i) + at(others, i) + (newest if i == 0 else 0) for i in range(BUCKETS)]


def after(circuit: str, breaker_failures: int, rate: float, attempts: int, failures: int,
          answered: int, reported: int) -> str:
    """circuit_after_v2."""
    if breaker_failures == 0:
        return "closed"
    if circuit == "half-open" and reported > 0:
        return "open"
    if circuit == "half-open" and answered > 0:
        return "closed"
    if circuit == "closed" and failures >= max(breaker_failures, rate * attempts / 100.0):
        return "open"
    return circuit


@dataclass
class StateRow:
    """One endpoint's state row, changed as the complete statement changes it."""

    window: float
    breaker_failures: int
    rate: float
    circuit: str = "closed"
    at: int | None = None
    attempts: list[int] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)

    def complete(self, now: float, answered: int, failed: int, earlier: list[int]) -> bool:
        """One batch's circuits entry at time ``now``; True when the row took it."""
        touched = self.circuit != "closed" or (
            self.breaker_failures > 0 and (failed > 0 or any(f > 0 for f in self.failures)))
        if not touched:
            return False
        index = bucket(now, self.window)
        attempts = shifted(self.attempts, self.at, index)
        failures = shifted(self.failures, self.at, index)
        was = self.circuit
        self.circuit = after(was, self.breaker_failures, self.rate,
                             sum(attempts) + sum(earlier) + answered + failed,
                             sum(failures) + failed, answered, failed)
        if self.circuit == "closed" and was != "closed":
            self.at, self.attempts, self.failures = None, [], []
        else:
            self.at = index
            self.attempts = added(attempts, earlier, answered + failed)
            self.failures = added(failures, [], failed)
        return True
