"""The series one endpoint costs, per --histograms: the figures docs/production.md gives."""

from __future__ import annotations

from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.observe.by_database import FleetMetrics
from dispatcher.observe.metrics import BacklogRow, Metrics
from tests.support.contract import METRICS, PROJECT_METRICS

ENDPOINTS = 200
# docs/production.md, "Series per endpoint": of the metrics the contract names, and of the
# project's own beside them (an endpoint with a --max-pending bound).
PER_ENDPOINT = {"endpoint": 54, "fleet": 15}
PROJECT_PER_ENDPOINT = 4
HISTOGRAM_SERIES = 15 + 24  # duration: 12 buckets, +Inf, sum, count; lag: 21 buckets


def family_of(sample_name: str) -> str:
    for suffix in ("_bucket", "_count", "_sum"):
        base = sample_name.removesuffix(suffix)
        if base != sample_name and METRICS.get(base, ("",))[0] == "histogram":
            return base
    return sample_name


def busy(metrics: Metrics, names: list[str]) -> Metrics:
    """Every endpoint known, measured and having sent: each of its series exists."""
    metrics.known_endpoints(names)
    metrics.record_backlog(BacklogRow(name, 1, 1.0, "open", 100, 1, 1, False, "acme",
                                      "operator") for name in names)
    for name in names:
        metrics.attempt(name, 0.1)
        metrics.delivered(name, 0.2)
        metrics.failed(name, "timeout")
        metrics.dead(name)
        metrics.resent(name)
    return metrics


def series(text: str) -> list[tuple[str, dict[str, str]]]:
    return [(family_of(s.name), s.labels) for family in text_string_to_metric_families(text)
            for s in family.samples]


@pytest.mark.parametrize("mode", ["endpoint", "fleet"])
def test_each_endpoint_costs_the_documented_series(mode: str) -> None:
    """At 200 endpoints each costs exactly the documented series of the contract's metrics
    (15 with fleet) and of the project's; fleet's histograms are 39 series in all."""
    names = [f"customer-{n}" for n in range(ENDPOINTS)]
    found = series(busy(Metrics(histograms=mode), names).render().decode())
    named = [(family, labels) for family, labels in found if family in METRICS]
    ours = [(family, labels) for family, labels in found if family in PROJECT_METRICS]
    per_endpoint = Counter(labels["endpoint"] for _, labels in named if "endpoint" in labels)
    assert set(per_endpoint.values()) == {PER_ENDPOINT[mode]}
    assert len(per_endpoint) == ENDPOINTS
    shared = [labels for _, labels in named if "endpoint" not in labels]
    assert len(shared) == (HISTOGRAM_SERIES if mode == "fleet" else 0)
    project = Counter(labels["endpoint"] for _, labels in ours if "endpoint" in labels)
    assert set(project.values()) == {PROJECT_PER_ENDPOINT}
    if mode == "fleet":  # the contract's bound: at most 15 an endpoint, the histograms aside
        assert len(named) == 15 * ENDPOINTS + HISTOGRAM_SERIES


def test_fleet_histograms_are_one_per_database_with_databases() -> None:
    """--databases with fleet: each database has its own two histograms, labelled database only;
    outbox_endpoint_info carries the database too."""
    metrics = FleetMetrics(histograms="fleet")
    for database in ("alpha", "beta"):
        busy(metrics.databases.of(database), ["hook"])
        metrics.databases.served(database, up=True)
    found = series(metrics.render().decode())
    histograms = [labels for family, labels in found if family in (
        "outbox_delivery_duration_seconds", "outbox_delivery_lag_seconds")]
    assert Counter(labels["database"] for labels in histograms) == {
        "alpha": HISTOGRAM_SERIES, "beta": HISTOGRAM_SERIES}
    assert all(set(labels) <= {"database", "le"} for labels in histograms)
    info = [labels for family, labels in found if family == "outbox_endpoint_info"]
    assert {labels["database"] for labels in info} == {"alpha", "beta"}
    assert all(set(labels) == {"database", "endpoint", "tenant", "disabled_by"}
               for labels in info)
