"""With --databases every series carries its database, each name once in the text."""

from __future__ import annotations

from dispatcher.observe.by_database import FleetMetrics
from dispatcher.observe.metrics import BacklogRow


def test_each_databases_series_carries_its_name_and_families_come_once() -> None:
    """Two databases' counters come labelled with their names, under one HELP and TYPE."""
    metrics = FleetMetrics()
    metrics.databases.served("tenant-a", True)
    metrics.databases.served("tenant-b", True)
    metrics.databases.of("tenant-a").delivered("hook", 0.2)
    metrics.databases.of("tenant-b").delivered("hook", 0.3)
    metrics.databases.of("tenant-b").delivered("hook", 0.3)
    text = metrics.render().decode()
    assert 'outbox_delivered_total{database="tenant-a",endpoint="hook"} 1.0' in text
    assert 'outbox_delivered_total{database="tenant-b",endpoint="hook"} 2.0' in text
    assert text.count("# TYPE outbox_delivered_total counter") == 1
    assert text.count("# TYPE process_cpu_seconds_total counter") == 1


def test_database_up_names_the_served_and_the_set_aside_only() -> None:
    """outbox_database_up is 1 served, 0 set aside, and absent for a database let go."""
    metrics = FleetMetrics()
    metrics.databases.served("tenant-a", True)
    metrics.databases.served("tenant-b", False)
    metrics.databases.served("tenant-c", True)
    metrics.databases.left("tenant-c")
    text = metrics.render().decode()
    assert 'outbox_database_up{database="tenant-a"} 1.0' in text
    assert 'outbox_database_up{database="tenant-b"} 0.0' in text
    assert "tenant-c" not in text


def test_database_listed_names_every_listed_database_whoever_serves_it() -> None:
    """outbox_database_listed is 1 for each database of the list, served here, set aside or
    left to another dispatcher; a database no longer listed has no series."""
    metrics = FleetMetrics()
    metrics.databases.served("tenant-a", True)
    metrics.databases.served("tenant-b", False)
    metrics.databases.listed(["tenant-a", "tenant-b", "tenant-c", "tenant-d"])
    metrics.databases.listed(["tenant-a", "tenant-b", "tenant-c"])
    text = metrics.render().decode()
    for name in ("tenant-a", "tenant-b", "tenant-c"):
        assert f'outbox_database_listed{{database="{name}"}} 1.0' in text
    assert "tenant-d" not in text
    assert 'outbox_database_up{database="tenant-c"}' not in text


def test_a_database_set_aside_exports_its_up_series_alone_and_one_let_go_nothing() -> None:
    """Set aside, a database exports outbox_database_up 0 and no gauge or counter; let go
    to another dispatcher, none of its series from that moment."""
    metrics = FleetMetrics()
    for name in ("served", "aside", "gone"):
        metrics.databases.served(name, True)
        metrics.databases.of(name).delivered("hook", 0.1)
        metrics.databases.of(name).record_backlog([BacklogRow("hook", 3, 12.0)])
    metrics.databases.served("aside", False)
    metrics.databases.left("gone")
    text = metrics.render().decode()
    assert 'outbox_pending{database="served",endpoint="hook"} 3.0' in text
    assert 'outbox_delivered_total{database="served",endpoint="hook"} 1.0' in text
    assert [line for line in text.splitlines() if 'database="aside"' in line] == [
        'outbox_database_up{database="aside"} 0.0']
    assert 'database="gone"' not in text
