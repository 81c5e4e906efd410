"""The dispatcher's Prometheus metrics, named, typed and labelled as documented.

Users' dashboards and alert rules depend on these names, so they are spelled
out once here and nowhere else. Two kinds of numbers:

- Events the delivery loop reports as they happen (attempts, deliveries,
  failures, dead letters), and the deliveries the maintainer discards by an
  endpoint's policy: counters and histograms, updated in memory.
- The backlog (``outbox_pending``, ``outbox_oldest_pending_seconds``, and of
  its tenants ``outbox_tenants_due`` and ``outbox_tenant_pending_max``), the
  circuits (``outbox_circuit_open``), whether each endpoint is enabled
  (``outbox_endpoint_enabled``) and whose it is and who disabled it
  (``outbox_endpoint_info``): properties of the database, shared by
  the whole fleet, not of this process. A custom collector reports
  it from a snapshot that :meth:`Metrics.refresh_backlog` takes with one cheap
  query just before each scrape, so the dispatch loop never pays for it. A
  snapshot older than ``stale_after`` is no longer reported: a frozen number
  would tell a dashboard the backlog stands still when nobody measured it.
- The database's MVCC horizon (``outbox_db_horizon_age_xids`` and
  ``outbox_db_horizon_held_seconds``, :mod:`dispatcher.observe.horizon`):
  measured in the same transaction as the backlog, beyond the documented
  names, as ``outbox_max_pending``, ``outbox_requests_resent_total`` and
  ``outbox_build_info`` are.
- The event loop's lag (``outbox_event_loop_lag_seconds``,
  :mod:`dispatcher.observe.loop_lag`), sampled by a timer of the dispatcher's
  own, also beyond the documented names.

Each :class:`Metrics` owns its :class:`~prometheus_client.CollectorRegistry`
(never the process-global one), so tests and embedders can make many. Beside
the documented series it carries what scrapers expect of every Python
exporter: the process (``process_*``), platform (``python_info``) and garbage
collector (``python_gc_*``) collectors, and ``outbox_build_info`` (constant
1, labelled with the package version and the schema version it is built for).
Labels are endpoint names, their tenants (``outbox_endpoint_info`` only) and
failure reasons: bounded by configuration, never an event id. With
``--histograms fleet`` the two histograms carry no endpoint at all, so that
thousands of endpoints cost 15 of the documented series each rather than 54
(docs/production.md, "Series per endpoint"). The ``*_created`` series
prometheus_client adds to counters and histograms by default are left out,
to keep exactly the documented names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg
from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from psycopg.rows import tuple_row

from dispatcher.config import HISTOGRAMS
from dispatcher.observe.horizon import HorizonCollector, HorizonWatch
from dispatcher.observe.loop_lag import LoopLag, LoopLagCollector
from outbox._shared.search_path import SET_LOCAL
from outbox._shared.version import current as version
from outbox.sql import SCHEMA_VERSION, queries

REASONS = ("timeout", "connect", "http_4xx", "http_5xx", "other")
"""The values of the ``reason`` label; anything else is counted as ``other``."""
DROP_REASONS = ("backlog-full", "disabled", "dead-expired")
"""The values of ``outbox_dropped_total``'s ``reason``: which policy of the endpoint
discarded the delivery (``--when-full drop-oldest``, ``disable --drop``, ``--keep-dead``)."""

# One HTTP attempt: a local webhook answers in milliseconds, a slow one runs
# into its timeout (10 s by default); +Inf catches longer timeouts.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Commit to delivered: milliseconds when all is well, hours when an endpoint
# was down and retries with backoff caught up later.
LAG_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
)


@dataclass(frozen=True, slots=True)
class BacklogRow:
    """One endpoint's backlog as the database measured it."""

    endpoint: str
    pending: int
    oldest_seconds: float
    circuit: str = "closed"  # closed, open or half-open
    max_pending: int | None = None  # the --max-pending bound, if any
    tenants_due: int = 0  # tenants with due deliveries (those without one count as one)
    largest_tenant: int = 0  # the pending deliveries of the tenant with the most
    enabled: bool = True  # False once disabled, by an operator or a 410 Gone
    tenant: str = ""  # the tenant the endpoint belongs to; "" for none
    disabled_by: str = ""  # "" while enabled, else operator, application or gone


@dataclass(frozen=True, slots=True)
class _Snapshot:
    rows: tuple[BacklogRow, ...]
    taken_at: float  # on the injected monotonic clock


class _Instruments:
    """Collects the counters and histograms, minus their ``*_created`` samples."""

    def __init__(self, instruments: Iterable[MetricWrapperBase]) -> None:
        self._instruments = tuple(instruments)

    def describe(self) -> Iterable[Metric]:
        for instrument in self._instruments:
            yield from instrument.describe()

    def collect(self) -> Iterable[Metric]:
        for instrument in self._instruments:
            for family in instrument.collect():
                # collect() builds fresh Metric objects, so filtering in place is safe.
                family.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield family


class _Backlog:
    """Reports the backlog gauges from the latest snapshot, at scrape time."""

    def __init__(self, owner: Metrics) -> None:
        self._owner = owner

    def describe(self) -> Iterable[Metric]:
        return self._families(())

    def collect(self) -> Iterable[Metric]:
        return self._families(self._owner.backlog())

    @staticmethod
    def _families(rows: Iterable[BacklogRow]) -> list[Metric]:
        pending = GaugeMetricFamily(
            "outbox_pending", "Deliveries waiting to be sent (state pending), per endpoint.",
            labels=["endpoint"])
        oldest = GaugeMetricFamily(
            "outbox_oldest_pending_seconds",
            "Age of the oldest waiting delivery per endpoint, on the database clock; 0 if none.",
            labels=["endpoint"])
        circuit = GaugeMetricFamily(
            "outbox_circuit_open",
            "1 while the endpoint's circuit is open or half-open (the fleet sends nothing but "
            "one probe per cool-down), else 0.", labels=["endpoint"])
        bound = GaugeMetricFamily(
            "outbox_max_pending",
            "The endpoint's --max-pending bound (publish() refuses events past it); absent "
            "when it has none.", labels=["endpoint"])
        tenants = GaugeMetricFamily(
            "outbox_tenants_due",
            "Tenants with deliveries due at the endpoint, sharing its request slots in rounds "
            "(deliveries without a tenant count as one tenant).", labels=["endpoint"])
        largest = GaugeMetricFamily(
            "outbox_tenant_pending_max",
            "Pending deliveries of the endpoint's tenant with the most (deliveries without a "
            "tenant count as one tenant); `outbox status --tenants` lists the largest.",
            labels=["endpoint"])
        enabled = GaugeMetricFamily(
            "outbox_endpoint_enabled",
            "1 while the endpoint is enabled, 0 while disabled (by an operator or a 410 Gone): "
            "its deliveries wait until `outbox endpoints enable`.", labels=["endpoint"])
        info = GaugeMetricFamily(
            "outbox_endpoint_info",
            "Always 1, one series per endpoint, to join on: its tenant (\"\" for none) and who "
            "disabled it (\"\" while enabled, else operator, application or gone).",
            labels=["endpoint", "tenant", "disabled_by"])
        for row in rows:
            tenants.add_metric([row.endpoint], float(row.tenants_due))
            largest.add_metric([row.endpoint], float(row.largest_tenant))
            pending.add_metric([row.endpoint], float(row.pending))
            oldest.add_metric([row.endpoint], row.oldest_seconds)
            circuit.add_metric([row.endpoint], 0.0 if row.circuit == "closed" else 1.0)
            enabled.add_metric([row.endpoint], 1.0 if row.enabled else 0.0)
            info.add_metric([row.endpoint, row.tenant, row.disabled_by], 1.0)
            if row.max_pending is not None:
                bound.add_metric([row.endpoint], float(row.max_pending))
        return [pending, oldest, circuit, bound, tenants, largest, enabled, info]


class BuildInfo:
    """``outbox_build_info``: which build runs, for dashboards to join on (always 1)."""

    def describe(self) -> Iterable[Metric]:
        return self.collect()

    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily(
            "outbox_build_info", "The running outbox-dispatcher: its version and the schema "
            "version it is built for; always 1.", labels=["version", "schema_version"])
        info.add_metric([version(), str(SCHEMA_VERSION)], 1.0)
        return [info]


def register_process_wide(registry: CollectorRegistry, loop_lag: LoopLag) -> None:
    """The series of the process as a whole: the loop's lag, the process, the platform,
    the garbage collector and the build."""
    registry.register(LoopLagCollector(loop_lag))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(BuildInfo())


class _Series(NamedTuple):
    """One endpoint's series that every request or delivery moves."""

    delivered: Counter
    duration: Histogram
    lag: Histogram


class Metrics:
    """The dispatcher's metrics in a registry of their own; the loop calls the verbs."""

    def __init__(self, *, stale_after: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 process_wide: bool = True, histograms: str = "endpoint") -> None:
        """``process_wide``: also the series of the process (``process_*``, ``python_*``,
        the loop's lag, the build); False for one database's share of a process serving
        several (:mod:`dispatcher.observe.by_database` labels and gathers them).
        ``histograms``: ``endpoint``, a duration and a lag histogram per endpoint (39
        series each); ``fleet``, one of each for all endpoints, without the label
        (``--histograms``)."""
        if histograms not in HISTOGRAMS:
            raise ValueError(f"histograms must be one of {', '.join(HISTOGRAMS)}")
        self.registry = CollectorRegistry()
        self._stale_after = stale_after
        self._clock = clock
        self._snapshot: _Snapshot | None = None
        self._by_endpoint: dict[str, _Series] = {}
        self._per_endpoint = histograms == "endpoint"
        histogram_labels = ["endpoint"] if self._per_endpoint else []
        self._delivered = Counter(
            "outbox_delivered_total", "Deliveries that succeeded (2xx), per endpoint.",
            ["endpoint"], registry=None)
        self._failures = Counter(
            "outbox_delivery_failures_total",
            "Failed delivery attempts, retried or not, per endpoint and reason.",
            ["endpoint", "reason"], registry=None)
        self._dead = Counter(
            "outbox_dead_letters_total", "Deliveries dead-lettered, per endpoint.",
            ["endpoint"], registry=None)
        self._dropped = Counter(
            "outbox_dropped_total",
            "Deliveries discarded by the endpoint's policy, per endpoint and reason: "
            "backlog-full (--when-full drop-oldest), disabled (disable --drop), dead-expired "
            "(--keep-dead). Counted once, by the dispatcher that discarded them.",
            ["endpoint", "reason"], registry=None)
        self._resent = Counter(
            "outbox_requests_resent_total",
            "Requests sent again at once on a new connection, per endpoint: the reused "
            "keep-alive connection closed before a byte of the answer. Not attempts.",
            ["endpoint"], registry=None)
        self._duration = Histogram(
            "outbox_delivery_duration_seconds", "Duration of one HTTP delivery attempt.",
            histogram_labels, buckets=DURATION_BUCKETS, registry=None)
        self._lag = Histogram(
            "outbox_delivery_lag_seconds",
            "Time from the event's insert (its publish, on the database clock) to its "
            "successful delivery.",
            histogram_labels, buckets=LAG_BUCKETS, registry=None)
        self.registry.register(_Instruments(
            (self._delivered, self._failures, self._dead, self._dropped, self._resent,
             self._duration, self._lag)))
        self.registry.register(_Backlog(self))
        self.horizon = HorizonWatch(clock, stale_after)
        self.registry.register(HorizonCollector(self.horizon))
        self.loop_lag = LoopLag()
        if process_wide:
            register_process_wide(self.registry, self.loop_lag)

    # -- what the delivery loop reports -------------------------------------

    def attempt(self, endpoint: str, duration: float) -> None:
        """One HTTP attempt took ``duration`` seconds, whatever its outcome."""
        self._series(endpoint).duration.observe(max(duration, 0.0))

    def delivered(self, endpoint: str, lag: float) -> None:
        """One event reached the endpoint, ``lag`` seconds after its insert (``publish()``,
        before the producer's commit)."""
        series = self._series(endpoint)
        series.delivered.inc()
        series.lag.observe(max(lag, 0.0))

    def _series(self, endpoint: str) -> _Series:
        """The endpoint's series of each request and delivery, looked up once: ``labels``
        takes a lock and builds its key on every call, a tenth of the metrics' CPU."""
        series = self._by_endpoint.get(endpoint)
        if series is None:
            if self._per_endpoint:
                duration, lag = self._duration.labels(endpoint), self._lag.labels(endpoint)
            else:  # --histograms fleet: one of each, whatever the endpoint
                duration, lag = self._duration, self._lag
            series = self._by_endpoint[endpoint] = _Series(
                self._delivered.labels(endpoint), duration, lag)
        return series

    def failed(self, endpoint: str, reason: str) -> None:
        """One attempt failed; an unknown reason counts as ``other`` (labels stay bounded)."""
        self._failures.labels(endpoint, reason if reason in REASONS else "other").inc()

    def dead(self, endpoint: str) -> None:
        """One delivery was dead-lettered."""
        self._dead.labels(endpoint).inc()

    def dropped(self, endpoint: str, reason: str, count: int) -> None:
        """``count`` deliveries were discarded by the endpoint's policy (``reason``, one of
        :data:`DROP_REASONS`)."""
        self._dropped.labels(endpoint, reason).inc(count)

    def resent(self, endpoint: str) -> None:
        """One request went twice: the reused connection closed before answering."""
        self._resent.labels(endpoint).inc()

    def known_endpoints(self, names: Iterable[str]) -> None:
        """Create every series of these endpoints at 0, so that rate() works from the start.

        Series of endpoints that disappear are kept until the process ends, as
        Prometheus client libraries do; endpoints change rarely.
        """
        for name in names:
            self._delivered.labels(name)
            self._dead.labels(name)
            self._resent.labels(name)
            if self._per_endpoint:
                self._duration.labels(name)
                self._lag.labels(name)
            for reason in REASONS:
                self._failures.labels(name, reason)
            for reason in DROP_REASONS:
                self._dropped.labels(name, reason)

    # -- the backlog, measured at scrape time --------------------------------

    async def refresh_backlog(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Measure the backlog with one query (``backlog`` in metrics.sql) and keep it;
        the horizon too (``horizon``).

        Runs in a transaction of its own, so that a connection that is not in
        autocommit mode is not left idle in a transaction holding a snapshot.
        """
        async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(SET_LOCAL)  # a connection behind a pooler has no pinned path
            await cur.execute(queries["backlog"])
            rows = await cur.fetchall()
            await cur.execute(queries["horizon"])
            holder = await cur.fetchone()
        self.measured(rows, holder)

    def measured(self, rows: Iterable[tuple[Any, ...]], holder: tuple[Any, ...] | None,
                 ) -> None:
        """Keep what the ``backlog`` and ``horizon`` queries answered, read here or by a
        dispatcher serving many databases through its short look at one
        (:mod:`dispatcher.many.watch`)."""
        if holder is None:
            self.horizon.observe(None, 0)
        else:
            _source, _pid, _role, _app, _name, xid, age_xids, _open = holder
            self.horizon.observe(int(xid), int(age_xids))
        self.record_backlog(BacklogRow(str(name), int(pending), float(oldest), str(circuit),
                                       None if bound is None else int(bound), int(due),
                                       int(largest), bool(enabled), str(tenant), str(by))
                            for name, pending, oldest, circuit, bound, due, largest, enabled,
                            tenant, by in rows)

    def record_backlog(self, rows: Iterable[BacklogRow]) -> None:
        """Keep a backlog measurement for the next scrapes (until it grows stale)."""
        self._snapshot = _Snapshot(tuple(rows), self._clock())

    def backlog_age(self) -> float | None:
        """Seconds since the backlog was last measured; None if never."""
        if self._snapshot is None:
            return None
        return self._clock() - self._snapshot.taken_at

    def backlog(self) -> tuple[BacklogRow, ...]:
        """The backlog to report now: the latest snapshot, or nothing once it is stale."""
        age = self.backlog_age()
        if self._snapshot is None or age is None or age > self._stale_after:
            return ()
        return self._snapshot.rows

    def render(self) -> bytes:
        """Everything in the Prometheus text format."""
        return generate_latest(self.registry)
