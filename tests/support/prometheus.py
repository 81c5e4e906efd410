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
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from outbox.testing import free_port
from tests.support.contract import MANY_METRICS, METRICS, PROJECT_METRICS

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "outbox.json"
# What Grafana puts for the dashboard's variables, as a query would see them.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h",
                     "$job": "outbox-dispatcher", "$endpoint": ".*"}
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


class Prometheus:
    """``prometheus`` on 127.0.0.1 scraping ``targets`` every ``interval`` under
    job="outbox-dispatcher", with the shortened rules, its data in a temporary directory.

    ``with Prometheus(["127.0.0.1:9464"]) as prom: prom.api("alerts")``
    """

    def __init__(self, targets: list[str], *, interval: str = "1s",
                 rules: dict[str, Any] | None = None) -> None:
        found = binary()
        assert found is not None, "prometheus is not installed"
        self.binary = found
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="outbox-prometheus-"))
        document = rules or shorten_for(yaml.safe_load(ALERTS.read_text()))
        (self.dir / "alerts.yml").write_text(yaml.safe_dump(document, sort_keys=False))
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval,
                       "scrape_timeout": interval},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": "outbox-dispatcher",
                                "static_configs": [{"targets": targets}]}],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self._log = (self.dir / "prometheus.log").open("w+", encoding="utf-8")
        self.process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        self.process = subprocess.Popen(
            [self.binary, f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, text=True, cwd=self.dir)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited early\n{self.log()}")
            try:
                if httpx.get(self.url + "/-/ready", timeout=2, trust_env=False).is_success:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready after 30 s\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

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

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Prometheus:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
