"""deploy/: alert rules valid, tested and built on the contract's metrics; the pod spec."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.contract import METRICS, PROJECT_METRICS
from tests.support.prometheus import parse_duration, shorten_for

CONTRACT = {**METRICS, **PROJECT_METRICS}

yaml = pytest.importorskip("yaml", reason="PyYAML is part of the test extras")

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RUNBOOK = Path(__file__).resolve().parents[2] / "deploy" / "README.md"
# Series the rules may read that other software exports.
EXTERNAL = {
    "up": "Prometheus itself, per scrape target",
    "kube_pod_container_status_ready": "kube-state-metrics",
}
_GROUPINGS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


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


def test_metric_name_extraction() -> None:
    """The helper finds series names and skips functions, labels and groupings."""
    expr = ('sum by (endpoint) (rate(outbox_delivered_total{job="x"}[5m])) '
            'unless on (job) count by (job) (up == 1) > 0.5')
    assert metric_names(expr) == {"outbox_delivered_total", "up"}


def test_rules_read_only_contract_metrics() -> None:
    """Every series an alert reads is a contract metric, one of ours, or a named external one."""
    allowed = set(EXTERNAL)
    for name, (kind, _) in CONTRACT.items():
        allowed.add(name)
        if kind == "histogram":
            allowed |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    used: set[str] = set()
    for rule in rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= allowed, (rule["alert"], names - allowed)
        used |= names
    for needed in ("outbox_delivery_failures_total", "outbox_dead_letters_total",
                   "outbox_oldest_pending_seconds", "up"):
        assert needed in used


def test_every_alert_has_severity_text_a_test_and_a_runbook() -> None:
    """Each alert has severity, summary, description, a firing test case and a runbook section."""
    tests = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())
    fired = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"]
             if case.get("exp_alerts")}
    runbook = RUNBOOK.read_text()
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names))
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        assert rule["alert"] in fired, f"no test case sees {rule['alert']} fire"
        assert f"### {rule['alert']}" in runbook, f"no runbook section for {rule['alert']}"


def github_anchors(markdown: str) -> set[str]:
    """The anchors a Markdown renderer (GitHub's rule) gives the headings of ``markdown``."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", title)))
    return anchors


def test_every_alert_links_its_runbook_section() -> None:
    """Each alert's runbook_url points at its own section of deploy/README.md."""
    anchors = github_anchors(RUNBOOK.read_text())
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page.endswith("/deploy/README.md"), url
        assert anchor == rule["alert"].lower(), url
        assert anchor in anchors, url


def test_live_rules_shorten_only_the_waits() -> None:
    """The live test's transform divides each for: by 60 and changes nothing else."""
    document = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    short = shorten_for(document)
    for before, after in zip(rules(), [r for g in short["groups"] for r in g["rules"]],
                             strict=True):
        assert {k: v for k, v in after.items() if k != "for"} == \
            {k: v for k, v in before.items() if k != "for"}
        if "for" in before:
            assert parse_duration(after["for"]) * 60 == pytest.approx(
                parse_duration(before["for"]))
    assert parse_duration("1h30m") == 5400
    assert shorten_for({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "1",
                                                            "for": "15m"}]}]},
                       )["groups"][0]["rules"][0]["for"] == "15000ms"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_checks_and_unit_tests_pass() -> None:
    """promtool accepts the rules and their unit tests pass."""
    for command in (["promtool", "check", "rules", "alerts.yml"],
                    ["promtool", "test", "rules", "alerts_test.yml"]):
        done = subprocess.run(command, cwd=PROMETHEUS, capture_output=True, text=True,
                              check=False, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


def test_sidecar_example_wires_secret_port_probes_and_grace() -> None:
    """The pod reads OUTBOX_DSN from a Secret, probes /healthz and /readyz, outlasts the grace."""
    path = PROMETHEUS.parent / "kubernetes" / "sidecar.yaml"
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "outbox-dispatcher")
    env = {e["name"]: e for e in sidecar["env"]}
    secret_ref = env["OUTBOX_DSN"]["valueFrom"]["secretKeyRef"]
    secret = next(d for d in documents if d["kind"] == "Secret")
    assert secret_ref["name"] == secret["metadata"]["name"]
    assert secret_ref["key"] in secret["stringData"]
    assert sidecar["ports"] == [{"name": "metrics", "containerPort": 9464}]
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    grace = float(env["OUTBOX_SHUTDOWN_GRACE"]["value"])
    assert pod["terminationGracePeriodSeconds"] > grace
