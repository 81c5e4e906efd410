"""deploy/grafana: every panel's query parses and reads only what the dispatcher exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.prometheus import (
    DASHBOARD,
    EXTERNAL,
    allowed_series,
    dashboard_queries,
    metric_names,
)

yaml = pytest.importorskip("yaml", reason="PyYAML is part of the test extras")


def test_panels_have_unique_ids_a_datasource_and_a_query() -> None:
    """Each panel has its own id and place; each non-row panel queries the chosen data source."""
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["description"], panel["title"]
        assert panel["targets"], panel["title"]
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "database", "endpoint"} <= names


def test_queries_read_only_exported_metrics_and_cover_them() -> None:
    """Panels read only the dispatcher's metrics (and `up`), and show every one of them."""
    allowed = allowed_series()
    used: set[str] = set()
    for title, expr in dashboard_queries():
        names = metric_names(expr)
        assert names, title
        assert names <= allowed, (title, names - allowed)
        used |= names
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    for variable in variables:
        if variable["type"] == "query":
            (series,) = re.findall(r"label_values\((\w+)", variable["definition"])
            assert series in allowed
    exported = {name.removesuffix("_bucket") for name in used} - set(EXTERNAL)
    assert exported >= {"outbox_delivered_total", "outbox_delivery_failures_total",
                        "outbox_dead_letters_total", "outbox_pending",
                        "outbox_oldest_pending_seconds", "outbox_circuit_open",
                        "outbox_delivery_duration_seconds", "outbox_delivery_lag_seconds"}


def test_histograms_are_shown_as_quantiles() -> None:
    """Both histograms appear through histogram_quantile over rates of their buckets, by le,
    per database and endpoint, and, once without endpoint (--histograms fleet), per database."""
    queries = [expr for _, expr in dashboard_queries()]
    for histogram in ("outbox_delivery_duration_seconds", "outbox_delivery_lag_seconds"):
        shown = [q for q in queries if f"{histogram}_bucket" in q]
        assert shown, histogram
        for query in shown:
            per_endpoint, fleet = query.split(" or ")
            assert per_endpoint.startswith("histogram_quantile(")
            assert re.search(r"sum by \(database, endpoint, le\) \(rate\(", per_endpoint)
            assert 'endpoint!=""' in per_endpoint, query
            assert fleet.startswith("histogram_quantile(")
            assert re.search(r"sum by \(database, le\) \(rate\(\w+\{[^}]*endpoint=\"\"", fleet)


def test_every_query_keeps_databases_apart() -> None:
    """Every sum or max by endpoint is also by database (same-named endpoints of two databases
    never merge), and every selector of an endpoint's series follows the database variable."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for grouping in re.findall(r"\b(?:sum|max) by \(([^)]*)\)", expr):
                labels = [label.strip() for label in grouping.split(",")]
                assert "endpoint" not in labels or "database" in labels, (panel["title"], expr)
            for selector in re.findall(r"\{([^}]*)\}", expr):
                if "endpoint" in selector:
                    assert 'database=~"$database"' in selector, (panel["title"], expr)
            if "{{endpoint}}" in target.get("legendFormat", ""):
                assert "{{database}}" in target["legendFormat"], panel["title"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_parses_every_query(tmp_path: Path) -> None:
    """promtool accepts every panel query (each made a recording rule)."""
    rules = [{"record": f"outbox_dashboard:panel_{n}", "expr": expr}
             for n, (_, expr) in enumerate(dashboard_queries())]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_latency_panels_show_fleet_histograms_as_all_endpoints(tmp_path: Path) -> None:
    """A dispatcher with --histograms fleet (database alpha) shows in the latency panels as
    "all endpoints", one with per-endpoint histograms (beta) per endpoint, in one query."""
    (query,) = [expr for title, expr in dashboard_queries()
                if title == "Attempt duration" and expr.startswith("histogram_quantile(0.5,")]
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "panel", "rules": [
        {"record": "panel", "expr": query}]}]}))
    bucket = 'outbox_delivery_duration_seconds_bucket{job="outbox-dispatcher", %s, le="%s"}'
    series = [{"series": bucket % (labels, le), "values": "0+60x10"}
              for labels in ('database="alpha"', 'database="beta", endpoint="hook"')
              for le in ("0.1", "+Inf")]
    expected = [{"labels": 'panel{database="alpha", endpoint="all endpoints"}', "value": 0.05},
                {"labels": 'panel{database="beta", endpoint="hook"}', "value": 0.05}]
    case = {"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": "panel", "eval_time": "5m", "exp_samples": expected}]}
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m",
                                     "tests": [case]}))
    done = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
