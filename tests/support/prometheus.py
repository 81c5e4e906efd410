"""A real Prometheus for the deploy tests: our rules with their waits shortened, a fast scrape.

The live tests start Debian's ``prometheus`` binary on 127.0.0.1 with its
data in a temporary directory, scraping the dispatchers they started, and
read its HTTP API. The rules are deploy/prometheus/alerts.yml with one
change, :func:`shorten_for`: every ``for:`` is divided by 60, so that a
minute becomes a second and an alert that needs 15 minutes in production
fires after 15 seconds here. Expressions, thresholds and range windows stay
as written.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.contract import MANY_METRICS, METRICS, PROJECT_METRICS
from tests.support.process import LocalServer

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "outbox.json"
# What Grafana puts for the dashboard's variables, as a query would see them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
                     "$job": "outbox-dispatcher", "$database": ".*", "$endpoint": ".*"}
FOR_DIVISOR = 60
"""Each rule's ``for:`` is divided by this: minutes become seconds."""

# Series the rules and the dashboard may read that other software exports.
EXTERNAL = {
    "up": "Prometheus itself, per scrape target",
    "kube_pod_container_status_ready": "kube-state-metrics",
}
_GROUPINGS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {"and", "or", "unless", "bool", "offset"}
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as ``10m`` or ``1h30m``."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (functions, labels, keywords left out)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r'"[^"]*"', "", bare)  # label_replace's strings
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    bare = _GROUPINGS.sub("", bare)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare):
        if bare[match.end():].lstrip().startswith("(") or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def allowed_series() -> set[str]:
    """Series a rule or panel may read: the dispatcher's (histograms' too) and EXTERNAL's."""
    allowed = set(EXTERNAL)
    for name, (kind, _) in {**METRICS, **PROJECT_METRICS, **MANY_METRICS}.items():
        allowed.add(name)
        if kind == "histogram":
            allowed |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return allowed


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the dashboard, its variables filled in."""
    def concrete(expr: str) -> str:
        for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        return expr
    queries = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            queries.append((panel["title"], concrete(target["expr"])))
    return queries


def shorten_for(document: dict[str, Any], divisor: int = FOR_DIVISOR) -> dict[str, Any]:
    """A copy of a rule file with every ``for:`` divided by ``divisor`` (in whole ms)."""
    groups = []
    for group in document["groups"]:
        rules = []
        for original in group["rules"]:
            rule = dict(original)
            if "for" in rule:
                rule["for"] = f"{round(parse_duration(rule['for']) * 1000 / divisor)}ms"
            rules.append(rule)
        groups.append({**group, "rules": rules})
    return {**document, "groups": groups}


def binary() -> str | None:
    """The ``prometheus`` server binary, if installed (Debian's package puts it on PATH)."""
    return shutil.which("prometheus")


class Prometheus(LocalServer):
    """``prometheus`` on 127.0.0.1 scraping ``targets`` every ``interval`` under
    job="outbox-dispatcher", with the shortened rules, its data in a temporary directory.

    ``with Prometheus(["127.0.0.1:9464"]) as prom: prom.api("alerts")``
    """

    name = "prometheus"
    log_name = "prometheus.log"
    output_is_log = True
    start_seconds = 30.0
    stop_seconds = 20.0

    def __init__(self, targets: list[str], *, interval: str = "1s",
                 rules: dict[str, Any] | None = None) -> None:
        found = binary()
        assert found is not None, "prometheus is not installed"
        self.binary = found
        super().__init__()
        document = rules or shorten_for(yaml.safe_load(ALERTS.read_text()))
        (self.directory / "alerts.yml").write_text(yaml.safe_dump(document, sort_keys=False))
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval,
                       "scrape_timeout": interval},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": "outbox-dispatcher",
                                "static_configs": [{"targets": targets}]}],
        }
        (self.directory / "prometheus.yml").write_text(yaml.safe_dump(config))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [self.binary, f"--config.file={self.directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]

    def ready(self) -> bool:
        """Once its rules are loaded and it scrapes: ``/-/ready`` answers 200."""
        try:
            return httpx.get(self.url + "/-/ready", timeout=2, trust_env=False).is_success
        except httpx.TransportError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH; its ``data`` (AssertionError unless the status is success)."""
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10,
                           trust_env=False)
        body = answer.json()
        assert body.get("status") == "success", (path, params, body)
        return body["data"]

    def alerts(self) -> dict[str, str]:
        """alertname -> state (``pending`` or ``firing``; firing wins across label sets)."""
        states: dict[str, str] = {}
        for alert in self.api("alerts")["alerts"]:
            name = alert["labels"]["alertname"]
            if states.get(name) != "firing":
                states[name] = alert["state"]
        return states
