"""deploy/prometheus: alert rules valid, tested, linked to their runbook, on the documented metrics.

The manifests, the image, the unit and the dashboard have their own test_deploy_* modules.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.markdown import anchors
from tests.support.prometheus import allowed_series, metric_names, parse_duration, shorten_for

yaml = pytest.importorskip("yaml", reason="PyYAML is part of the test extras")

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RUNBOOK = Path(__file__).resolve().parents[2] / "deploy" / "README.md"
def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_metric_name_extraction() -> None:
    """The helper finds series names and skips functions, labels and groupings."""
    expr = ('sum by (endpoint) (rate(outbox_delivered_total{job="x"}[5m])) '
            'unless on (job) count by (job) (up == 1) > 0.5')
    assert metric_names(expr) == {"outbox_delivered_total", "up"}


def test_rules_read_only_contract_metrics() -> None:
    """Every series an alert reads is a documented metric, one of ours, or a named external one."""
    allowed = allowed_series()
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
        severities = ("info",) if rule["labels"].get("audience") else ("warning", "critical")
        assert rule["labels"]["severity"] in severities, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        assert rule["alert"] in fired, f"no test case sees {rule['alert']} fire"
        assert f"### {rule['alert']}" in runbook, f"no runbook section for {rule['alert']}"


def test_every_alert_links_its_runbook_section() -> None:
    """Each alert's runbook_url names its own section of deploy/README.md from the repository
    root, a link that holds on every copy (no placeholder host)."""
    headings = anchors(RUNBOOK.read_text())
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "deploy/README.md", url
        assert (RUNBOOK.parents[1] / page).is_file(), url
        assert anchor == rule["alert"].lower(), url
        assert anchor in headings, url


def test_the_documented_base_makes_every_runbook_url_absolute() -> None:
    """The sed line the runbook and alerts.yml show turns each runbook_url into the base's
    deploy/README.md#section, and changes nothing else."""
    shown = [line.strip() for line in (PROMETHEUS / "alerts.yml").read_text().splitlines()
             if "sed -i" in line]
    assert len(shown) == 1
    assert shown[0].removeprefix("#").strip().split("' ")[0] in RUNBOOK.read_text()
    base = "https://git.corp/ops/outbox/-/blob/v0.3.0/"
    text = (PROMETHEUS / "alerts.yml").read_text()
    done = subprocess.run(["sed", f's|runbook_url: "|runbook_url: "{base}|'], input=text,
                          capture_output=True, text=True, check=True).stdout
    before = yaml.safe_load(text)
    after = yaml.safe_load(done)
    for old, new in zip([r for g in before["groups"] for r in g["rules"]],
                        [r for g in after["groups"] for r in g["rules"]], strict=True):
        assert new["annotations"]["runbook_url"] == base + old["annotations"]["runbook_url"]
        assert {**new, "annotations": {}} == {**old, "annotations": {}}


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


def test_customer_rules_are_apart_and_never_a_page() -> None:
    """Each rule on a failing or disabled endpoint has a customer twin, labelled
    audience="customer" and severity info, that carries the tenant; the operator's leaves
    customers' endpoints out, and both leave out an endpoint its application disabled."""
    by_name = {rule["alert"]: rule for rule in rules()}
    for name in ("DeliveryFailing", "DeadLetters", "CircuitOpen", "EndpointDisabled"):
        ours, theirs = by_name[f"Outbox{name}"], by_name[f"OutboxCustomer{name}"]
        assert "audience" not in ours["labels"]
        assert theirs["labels"] == {"severity": "info", "audience": "customer"}
        assert 'outbox_endpoint_info{tenant!=""}' in ours["expr"]
        assert "tenant" in theirs["expr"]
        assert 'disabled_by="application"' in ours["expr"]
        assert "application" in theirs["expr"] or "operator|gone" in theirs["expr"]
    customer = [rule["alert"] for rule in rules() if rule["labels"].get("audience")]
    assert sorted(customer) == sorted(f"OutboxCustomer{name}" for name in (
        "DeliveryFailing", "DeadLetters", "CircuitOpen", "EndpointDisabled"))


def runbook_section(alert: str) -> str:
    text = RUNBOOK.read_text()
    start = text.index(f"\n### {alert}\n")
    end = text.find("\n### ", start + 1)
    return text[start:end if end != -1 else len(text)]


def test_runbooks_of_failing_endpoints_open_the_endpoints_page() -> None:
    """Runbooks of a failing, open or disabled endpoint name its page in the web view,
    /endpoints/NAME; an open circuit's not the dead letters (nothing is dead yet)."""
    for alert in ("OutboxDeliveryFailing", "OutboxCircuitOpen", "OutboxEndpointDisabled",
                  "OutboxCustomerDeliveryFailing", "OutboxCustomerCircuitOpen",
                  "OutboxCustomerEndpointDisabled"):
        (web,) = [line for line in runbook_section(alert).splitlines()
                  if line.startswith("**Web view**")]
        assert "(http://127.0.0.1:8080/endpoints/NAME)" in web, alert
        if "CircuitOpen" in alert:
            assert "/dead" not in web, alert
