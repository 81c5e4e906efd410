"""The metrics of a dispatcher serving many databases: each series labelled ``database``.

Each database keeps a :class:`~dispatcher.observe.metrics.Metrics` of its own
(its counters survive the database's connections being given back and taken
again), without the series of the process. At each scrape
:class:`ByDatabase` collects them all, adds ``database="NAME"`` to every
sample and gathers the samples of one name into one family, so that the text
holds each name once, as Prometheus expects. ``outbox_database_up`` says which
databases this dispatcher serves (1) and which it has set aside (0); those it
leaves to other dispatchers have no series. Only a database served here
exports its other series: one set aside exports ``outbox_database_up 0``
alone (its gauges would be a measurement nobody can renew), and one let go
to another dispatcher, or no longer listed, none from that moment (its
metrics are forgotten: the dispatcher serving it now exports them, and the
two never add up to twice the backlog for more than a moment). ``outbox_database_listed`` is 1
for every database its list holds, served here or not: a listed database
with no ``outbox_database_up`` series on any dispatcher is served by none
(``OutboxDatabaseUnserved``). With a lone ``--dsn`` none of this is built, and
no series carries the label.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from dispatcher.observe.loop_lag import LoopLag
from dispatcher.observe.metrics import Metrics, register_process_wide


class ByDatabase:
    """Every database's metrics, labelled with its name; and whether each is served."""

    def __init__(self, *, histograms: str = "endpoint") -> None:
        self._histograms = histograms  # --histograms, for every database's Metrics
        self._sites: dict[str, Metrics] = {}
        self._up: dict[str, bool] = {}
        self._listed: frozenset[str] = frozenset()

    def of(self, name: str) -> Metrics:
        """The database's metrics, made on first use and kept while the process runs."""
        metrics = self._sites.get(name)
        if metrics is None:
            metrics = self._sites[name] = Metrics(process_wide=False,
                                                  histograms=self._histograms)
        return metrics

    def served(self, name: str, up: bool) -> None:
        """This dispatcher serves the database (up), or has set it aside (not up)."""
        self._up[name] = up

    def left(self, name: str) -> None:
        """The database is another dispatcher's now, or no longer listed: no series."""
        self._up.pop(name, None)
        self._sites.pop(name, None)

    def listed(self, names: Iterable[str]) -> None:
        """The databases the list in force holds, whoever serves them."""
        self._listed = frozenset(names)

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for name, metrics in sorted(self._sites.items()):
            if not self._up.get(name):
                continue  # set aside: its up series alone
            for family in metrics.registry.collect():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(family.name, family.documentation,
                                                        family.type, family.unit)
                into.samples.extend(sample._replace(labels={**sample.labels, "database": name})
                                    for sample in family.samples)
        up = GaugeMetricFamily(
            "outbox_database_up", "1 for each database this dispatcher serves, 0 for one it "
            "has set aside (unreachable, refused, or without a schema it can use).",
            labels=["database"])
        for name, served in sorted(self._up.items()):
            up.add_metric([name], 1.0 if served else 0.0)
        listed = GaugeMetricFamily(
            "outbox_database_listed", "1 for each database the databases list holds, served "
            "by this dispatcher or by another.", labels=["database"])
        for name in sorted(self._listed):
            listed.add_metric([name], 1.0)
        return [*merged.values(), up, listed]


class FleetMetrics:
    """The process's registry: its own series, and every database's, labelled."""

    def __init__(self, *, histograms: str = "endpoint") -> None:
        self.registry = CollectorRegistry()
        self.databases = ByDatabase(histograms=histograms)
        self.registry.register(self.databases)
        self.loop_lag = LoopLag()
        register_process_wide(self.registry, self.loop_lag)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def backlog_age(self) -> float | None:
        """Each database's backlog is measured by its own upkeep, not at the scrape."""
        return None

    async def refresh_backlog(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Nothing: the scrape opens no connection of its own (see :meth:`backlog_age`)."""
