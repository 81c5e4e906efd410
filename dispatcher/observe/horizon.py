"""The database's MVCC horizon as two gauges: how old it is, and how long it has stood.

A transaction left open anywhere in the database (an analytics query,
``pg_dump``, a session idle in transaction), a replication slot or a
prepared transaction keeps vacuum from removing any dead version newer than
its snapshot; every claimed and finished delivery leaves one, so each claim
steps over more of them and delivery falls behind. The ``horizon`` query
(metrics.sql) finds the oldest such holder at scrape time.

Two numbers, because a least-privilege role sees the holder's pid and
``backend_xmin`` but not its ``xact_start``:

- ``outbox_db_horizon_age_xids``: ``age()`` of the horizon, the transaction
  ids begun since; about as many as writes the database has made since, and
  so a measure of the dead versions that may pile up behind it.
- ``outbox_db_horizon_held_seconds``: how long this dispatcher has seen that
  same horizon (the same transaction id) hold, on its own monotonic clock,
  remembered between scrapes. A lower bound, with the scrape interval as its
  resolution: 0 the first time a horizon is seen, and again after the
  dispatcher restarts. It needs no privilege, and it measures what costs: a
  horizon that has not moved, whoever holds it.

Like the backlog, the reading is dropped once older than ``stale_after``. No
labels: the holder's pid is not a bounded label; ``outbox status`` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric


@dataclass(frozen=True, slots=True)
class _Reading:
    age_xids: int
    held_seconds: float
    taken_at: float


class HorizonWatch:
    """Remembers the horizon between scrapes, to tell how long the same one has held."""

    def __init__(self, clock: Callable[[], float], stale_after: float) -> None:
        self._clock = clock
        self._stale_after = stale_after
        self._xid: int | None = None
        self._since = 0.0  # when self._xid was first seen, on the clock
        self._reading: _Reading | None = None

    def observe(self, xid: int | None, age_xids: int) -> None:
        """One measurement: the oldest holder's transaction id (None: nothing holds one)."""
        now = self._clock()
        if xid is None:
            self._xid = None
            self._reading = _Reading(0, 0.0, now)
            return
        if xid != self._xid:
            self._xid, self._since = xid, now
        self._reading = _Reading(max(age_xids, 0), now - self._since, now)

    def reading(self) -> tuple[int, float] | None:
        """(age in transaction ids, seconds held) to report now; None if never measured or
        stale."""
        reading = self._reading
        if reading is None or self._clock() - reading.taken_at > self._stale_after:
            return None
        return reading.age_xids, reading.held_seconds


class HorizonCollector:
    """Reports the two horizon gauges at scrape time, from the watch's latest reading."""

    def __init__(self, watch: HorizonWatch) -> None:
        self._watch = watch

    def describe(self) -> Iterable[Metric]:
        return self._families(None)

    def collect(self) -> Iterable[Metric]:
        return self._families(self._watch.reading())

    @staticmethod
    def _families(reading: tuple[int, float] | None) -> list[Metric]:
        age = GaugeMetricFamily(
            "outbox_db_horizon_age_xids",
            "Age in transaction ids of the oldest snapshot or transaction (of this database's "
            "sessions, replication slots or prepared transactions) that keeps vacuum from "
            "removing dead deliveries; 0 when none.")
        held = GaugeMetricFamily(
            "outbox_db_horizon_held_seconds",
            "How long this dispatcher has seen that same horizon hold, measured between its "
            "scrapes (a lower bound; 0 when first seen, or none).")
        if reading is not None:
            age.add_metric([], float(reading[0]))
            held.add_metric([], reading[1])
        return [age, held]
