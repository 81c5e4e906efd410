"""The dispatcher's metrics: the documented names, types, labels and buckets, in memory."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dispatcher.observe.metrics import DROP_REASONS as METRIC_DROP_REASONS
from dispatcher.observe.metrics import (
    DURATION_BUCKETS,
    LAG_BUCKETS,
    REASONS,
    BacklogRow,
    Metrics,
)
from outbox import __version__
from outbox.sql import SCHEMA_VERSION
from tests.support.clock import FakeClock
from tests.support.contract import (
    DROP_REASONS,
    FAILURE_REASONS,
    METRICS,
    PROJECT_METRICS,
    STANDARD_PREFIXES,
)

CONTRACT = METRICS
CONTRACT_REASONS = FAILURE_REASONS


def type_lines(text: str) -> dict[str, str]:
    """``# TYPE name type`` lines of an exposition, as {name: type}."""
    found = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            found[name] = kind
    return found


def samples(metrics: Metrics) -> list[Sample]:
    text = metrics.render().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    for sample in samples(metrics):
        if sample.name == name and sample.labels == labels:
            return float(sample.value)
    return None


def exercised() -> Metrics:
    metrics = Metrics()
    metrics.attempt("workflow", 0.012)
    metrics.delivered("workflow", 0.3)
    metrics.failed("workflow", "http_5xx")
    metrics.dead("workflow")
    metrics.dropped("workflow", "backlog-full", 2)
    metrics.record_backlog([BacklogRow("workflow", 3, 12.5)])
    return metrics


def test_every_contract_metric_has_its_type_line() -> None:
    """/metrics text carries a TYPE line with the documented type for each documented metric."""
    types = type_lines(exercised().render().decode())
    for name, (kind, _) in CONTRACT.items():
        assert types.get(name) == kind, name


def test_only_contract_names_are_exported() -> None:
    """No other outbox_ series (such as *_created) appear beside the documented ones and the
    project's; the rest are the standard collectors'."""
    allowed = set()
    for name, (kind, _) in (CONTRACT | PROJECT_METRICS).items():
        allowed.add(name)
        if kind == "histogram":
            allowed |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    names = {s.name for s in samples(exercised()) if not s.name.startswith(STANDARD_PREFIXES)}
    assert names <= allowed
    assert "outbox_delivered_created" not in exercised().render().decode()


def test_labels_are_exactly_the_contract_labels() -> None:
    """Each sample carries exactly the documented labels (plus le on histogram buckets)."""
    metrics = exercised()
    seen = set()
    for sample in samples(metrics):
        if sample.name.startswith(STANDARD_PREFIXES) or sample.name in PROJECT_METRICS:
            continue
        base = sample.name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        name = base if base in CONTRACT else sample.name
        expected = CONTRACT[name][1] | ({"le"} if sample.name.endswith("_bucket") else set())
        assert set(sample.labels) == expected, sample
        seen.add(name)
    assert seen == set(CONTRACT)


def test_the_bound_gauge_is_there_only_for_bounded_endpoints() -> None:
    """outbox_max_pending has a sample for an endpoint with --max-pending, none without."""
    metrics = Metrics()
    metrics.record_backlog([BacklogRow("bounded", 3, 1.0, "closed", 500),
                            BacklogRow("free", 3, 1.0, "closed", None)])
    bound = [s for s in samples(metrics) if s.name == "outbox_max_pending"]
    assert [(s.labels["endpoint"], s.value) for s in bound] == [("bounded", 500.0)]


def test_the_tenant_gauges_come_per_endpoint_without_a_tenant_label() -> None:
    """outbox_tenants_due and outbox_tenant_pending_max: one series per endpoint, no tenant."""
    metrics = Metrics()
    metrics.record_backlog([BacklogRow("shared", 50_003, 9.0, "closed", None, 2, 50_000)])
    found = {s.name: (s.labels, s.value) for s in samples(metrics)
             if s.name in ("outbox_tenants_due", "outbox_tenant_pending_max")}
    assert found == {"outbox_tenants_due": ({"endpoint": "shared"}, 2.0),
                     "outbox_tenant_pending_max": ({"endpoint": "shared"}, 50_000.0)}


def test_verbs_count_what_they_say() -> None:
    """attempt, delivered, failed and dead move their own series, per endpoint and reason."""
    metrics = Metrics()
    for _ in range(3):
        metrics.delivered("a", 1.0)
    metrics.failed("a", "timeout")
    metrics.failed("a", "timeout")
    metrics.failed("b", "connect")
    metrics.dead("b")
    metrics.attempt("a", 0.2)
    assert value(metrics, "outbox_delivered_total", endpoint="a") == 3
    assert value(metrics, "outbox_delivery_failures_total", endpoint="a", reason="timeout") == 2
    assert value(metrics, "outbox_delivery_failures_total", endpoint="b", reason="connect") == 1
    assert value(metrics, "outbox_dead_letters_total", endpoint="b") == 1
    assert value(metrics, "outbox_delivery_duration_seconds_count", endpoint="a") == 1
    assert value(metrics, "outbox_delivery_duration_seconds_sum", endpoint="a") == 0.2
    assert value(metrics, "outbox_delivery_lag_seconds_count", endpoint="a") == 3


def test_dropped_counts_each_reason_apart() -> None:
    """dropped adds its count to the endpoint's series of that reason, the documented three."""
    metrics = Metrics()
    metrics.dropped("a", "backlog-full", 3)
    metrics.dropped("a", "backlog-full", 2)
    metrics.dropped("a", "disabled", 1)
    metrics.dropped("b", "dead-expired", 4)
    assert value(metrics, "outbox_dropped_total", endpoint="a", reason="backlog-full") == 5
    assert value(metrics, "outbox_dropped_total", endpoint="a", reason="disabled") == 1
    assert value(metrics, "outbox_dropped_total", endpoint="b", reason="dead-expired") == 4
    assert set(METRIC_DROP_REASONS) == set(DROP_REASONS)


def test_unknown_reason_counts_as_other() -> None:
    """A reason outside the documented five is counted as other, keeping labels bounded."""
    metrics = Metrics()
    metrics.failed("a", "tls-handshake-weirdness")
    assert value(metrics, "outbox_delivery_failures_total", endpoint="a", reason="other") == 1
    reasons = {s.labels.get("reason") for s in samples(metrics) if "reason" in s.labels}
    assert reasons == {"other"}
    assert set(REASONS) == set(CONTRACT_REASONS)


def test_known_endpoints_start_every_series_at_zero() -> None:
    """known_endpoints makes counters of every reason and histograms show 0 before any event."""
    metrics = Metrics()
    metrics.known_endpoints(["a", "b"])
    for endpoint in ("a", "b"):
        assert value(metrics, "outbox_delivered_total", endpoint=endpoint) == 0
        assert value(metrics, "outbox_dead_letters_total", endpoint=endpoint) == 0
        for reason in CONTRACT_REASONS:
            assert value(metrics, "outbox_delivery_failures_total",
                         endpoint=endpoint, reason=reason) == 0
        assert value(metrics, "outbox_delivery_duration_seconds_count", endpoint=endpoint) == 0
        assert value(metrics, "outbox_delivery_lag_seconds_count", endpoint=endpoint) == 0
        for reason in DROP_REASONS:
            assert value(metrics, "outbox_dropped_total", endpoint=endpoint, reason=reason) == 0


def test_duration_buckets_span_milliseconds_to_thirty_seconds() -> None:
    """One attempt's histogram has buckets from 5 ms to 30 s, and observations land in them."""
    assert DURATION_BUCKETS[0] == 0.005
    assert DURATION_BUCKETS[-1] == 30.0
    metrics = Metrics()
    metrics.attempt("a", 0.004)
    metrics.attempt("a", 0.7)
    metrics.attempt("a", 45.0)
    bucket = "outbox_delivery_duration_seconds_bucket"
    assert value(metrics, bucket, endpoint="a", le="0.005") == 1
    assert value(metrics, bucket, endpoint="a", le="1.0") == 2
    assert value(metrics, bucket, endpoint="a", le="30.0") == 2
    assert value(metrics, bucket, endpoint="a", le="+Inf") == 3


def test_lag_buckets_span_milliseconds_to_hours() -> None:
    """The commit-to-delivered histogram reaches from ~5 ms to at least several hours."""
    assert LAG_BUCKETS[0] <= 0.005
    assert LAG_BUCKETS[-1] >= 4 * 3600
    assert list(LAG_BUCKETS) == sorted(LAG_BUCKETS)
    metrics = Metrics()
    metrics.delivered("a", 2 * 3600.0)
    bucket = "outbox_delivery_lag_seconds_bucket"
    assert value(metrics, bucket, endpoint="a", le="3600.0") == 0
    assert value(metrics, bucket, endpoint="a", le="7200.0") == 1


def test_backlog_gauges_report_the_snapshot() -> None:
    """The backlog gauges show the latest snapshot, zeros included, and nothing before one."""
    metrics = Metrics()
    assert value(metrics, "outbox_pending", endpoint="a") is None
    metrics.record_backlog([BacklogRow("a", 5, 61.5), BacklogRow("b", 0, 0.0)])
    assert value(metrics, "outbox_pending", endpoint="a") == 5
    assert value(metrics, "outbox_oldest_pending_seconds", endpoint="a") == 61.5
    assert value(metrics, "outbox_pending", endpoint="b") == 0
    assert value(metrics, "outbox_oldest_pending_seconds", endpoint="b") == 0
    metrics.record_backlog([BacklogRow("b", 1, 2.0)])
    assert value(metrics, "outbox_pending", endpoint="a") is None
    assert value(metrics, "outbox_pending", endpoint="b") == 1


def test_stale_backlog_is_no_longer_reported() -> None:
    """A snapshot older than stale_after disappears instead of freezing the gauges."""
    clock = FakeClock()
    metrics = Metrics(stale_after=60.0, clock=clock)
    metrics.record_backlog([BacklogRow("a", 5, 1.0)])
    clock.now += 59.0
    assert metrics.backlog_age() == 59.0
    assert value(metrics, "outbox_pending", endpoint="a") == 5
    clock.now += 2.0
    assert value(metrics, "outbox_pending", endpoint="a") is None
    assert "# TYPE outbox_pending gauge" in metrics.render().decode()


def test_each_metrics_object_has_its_own_registry() -> None:
    """Two Metrics objects count separately (no process-global registry)."""
    first, second = Metrics(), Metrics()
    first.dead("a")
    assert value(first, "outbox_dead_letters_total", endpoint="a") == 1
    assert value(second, "outbox_dead_letters_total", endpoint="a") is None


def test_standard_collectors_and_build_info() -> None:
    """/metrics has the process and platform series scrapers expect, and outbox_build_info."""
    metrics = Metrics()
    names = {s.name for s in samples(metrics)}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes",
            "process_open_fds", "python_info", "python_gc_objects_collected_total"} <= names
    assert value(metrics, "outbox_build_info", version=__version__,
                 schema_version=str(SCHEMA_VERSION)) == 1.0
    assert type_lines(metrics.render().decode())["outbox_build_info"] == "gauge"
    Metrics()  # each instance has its own registry: a second one collides with nothing


def test_endpoint_info_names_each_endpoints_tenant_and_who_disabled_it() -> None:
    """outbox_endpoint_info: 1 per endpoint, tenant "" for none, disabled_by "" while enabled."""
    metrics = Metrics()
    metrics.record_backlog([
        BacklogRow("ours", 0, 0.0),
        BacklogRow("acme-hook", 0, 0.0, tenant="acme"),
        BacklogRow("paused", 2, 9.0, enabled=False, tenant="acme", disabled_by="application"),
        BacklogRow("moved", 2, 9.0, enabled=False, disabled_by="gone")])
    info = {s.labels["endpoint"]: (s.labels, s.value) for s in samples(metrics)
            if s.name == "outbox_endpoint_info"}
    assert info == {
        "ours": ({"endpoint": "ours", "tenant": "", "disabled_by": ""}, 1.0),
        "acme-hook": ({"endpoint": "acme-hook", "tenant": "acme", "disabled_by": ""}, 1.0),
        "paused": ({"endpoint": "paused", "tenant": "acme", "disabled_by": "application"}, 1.0),
        "moved": ({"endpoint": "moved", "tenant": "", "disabled_by": "gone"}, 1.0)}
    metrics.record_backlog([])
    assert not [s for s in samples(metrics) if s.name == "outbox_endpoint_info"]


def test_fleet_histograms_carry_no_endpoint() -> None:
    """--histograms fleet: one duration and one lag histogram for every endpoint together,
    from the start; the counters keep their endpoint."""
    metrics = Metrics(histograms="fleet")
    assert value(metrics, "outbox_delivery_duration_seconds_count") == 0
    metrics.known_endpoints(["a", "b"])
    metrics.attempt("a", 0.2)
    metrics.attempt("b", 0.4)
    metrics.delivered("b", 3.0)
    assert value(metrics, "outbox_delivery_duration_seconds_count") == 2
    assert value(metrics, "outbox_delivery_duration_seconds_sum") == pytest.approx(0.6)
    assert value(metrics, "outbox_delivery_lag_seconds_count") == 1
    assert value(metrics, "outbox_delivery_lag_seconds_bucket", le="5.0") == 1
    assert value(metrics, "outbox_delivered_total", endpoint="b") == 1
    histograms = [s for s in samples(metrics) if s.name.startswith(
        ("outbox_delivery_duration_seconds", "outbox_delivery_lag_seconds"))]
    assert histograms
    assert all(set(s.labels) <= {"le"} for s in histograms)
