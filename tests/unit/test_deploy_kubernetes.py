"""deploy/kubernetes: valid by the Kubernetes schemas, restricted pods, in step with the image."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.prometheus import parse_duration

yaml = pytest.importorskip("yaml", reason="PyYAML is part of the test extras")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
IMAGE = "registry.example.com/shop/outbox-dispatcher:0.1.0"
# PodMonitor is a custom resource (Prometheus Operator): the fields of monitoring.coreos.com/v1
# this project uses, checked here since no Kubernetes schema knows them.
PODMONITOR_FIELDS = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel"}
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "relabelings"}
RELABEL_FIELDS = {"sourceLabels", "separator", "targetLabel", "regex", "replacement", "action"}


def documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(KUBERNETES.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents() if doc["kind"] == kind]


def pod_templates() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, pod template) of every Deployment and Job."""
    for doc in documents():
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]


def ours(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's containers and init containers that run the dispatcher image."""
    return [c for c in pod.get("initContainers", []) + pod["containers"] if c["image"] == IMAGE]


def dockerfile_user() -> int:
    users = re.findall(r"^USER\s+(\d+)(?::(\d+))?\s*$", DOCKERFILE.read_text(), re.M)
    assert len(users) == 1, users
    return int(users[0][0])


def test_manifests_are_valid_against_the_kubernetes_schemas() -> None:
    """Every built-in resource passes strict schema validation, oldest and newest bundled."""
    validate = pytest.importorskip("kubernetes_validate.utils", reason="in the test extras")
    versions = validate.all_versions()
    checked = set()
    for doc in documents():
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        for version in (versions[0], versions[-1]):
            validate.validate(doc, version, strict=True)
        checked.add(doc["kind"])
    assert {"Deployment", "Job", "NetworkPolicy", "PodDisruptionBudget", "Secret"} <= checked


def test_pods_meet_the_restricted_profile_as_the_image_user() -> None:
    """Pods run non-root under RuntimeDefault seccomp; ours as the image's user, read-only, /tmp."""
    uid = dockerfile_user()
    for name, template in pod_templates():
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        tmp = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        assert ours(pod), name
        for container in ours(pod):
            context = container["securityContext"]
            assert context["runAsUser"] == uid, (name, container["name"])
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts.get("/tmp") in tmp, (name, container["name"])


def test_commands_follow_the_image_and_the_migration_gate() -> None:
    """The dispatcher runs the image's entry point; init containers wait on migrate --check."""
    entrypoint = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", DOCKERFILE.read_text(), re.M)
    assert entrypoint == ['["outbox-dispatcher"]']
    job = of_kind("Job")[0]["spec"]["template"]["spec"]
    assert job["containers"][0]["command"] == ["outbox", "migrate"]
    assert job["restartPolicy"] in ("OnFailure", "Never")
    deployments = of_kind("Deployment")
    assert len(deployments) == 2
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        dispatcher = next(c for c in pod["containers"] if c["name"] == "outbox-dispatcher")
        assert not {"command", "args"} & set(dispatcher)
        (gate,) = pod["initContainers"]
        script = " ".join(gate["command"])
        assert "until outbox migrate --check" in script
        # It only waits: every `outbox migrate` in it is a --check (the Job changes the schema).
        assert re.findall(r"outbox migrate\S*(?: \S+)?", script) == ["outbox migrate --check;"]


def test_dispatchers_wire_secret_port_probes_and_grace() -> None:
    """Both Deployments read OUTBOX_DSN from the Secret, probe startup, health and readiness."""
    secret = of_kind("Secret")[0]
    for deployment in of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        sidecar = next(c for c in pod["containers"] if c["name"] == "outbox-dispatcher")
        env = {e["name"]: e for e in sidecar["env"]}
        secret_ref = env["OUTBOX_DSN"]["valueFrom"]["secretKeyRef"]
        assert secret_ref["name"] == secret["metadata"]["name"]
        assert secret_ref["key"] in secret["stringData"]
        assert sidecar["ports"] == [{"name": "metrics", "containerPort": 9464}]
        assert re.search(r"^EXPOSE 9464$", DOCKERFILE.read_text(), re.M)
        assert sidecar["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        grace = float(env["OUTBOX_SHUTDOWN_GRACE"]["value"])
        assert pod["terminationGracePeriodSeconds"] > grace


def test_disruption_budget_covers_the_standalone_dispatchers() -> None:
    """The PodDisruptionBudget selects the standalone pods and leaves one replica to drain."""
    (budget,) = of_kind("PodDisruptionBudget")
    standalone = next(d for d in of_kind("Deployment")
                      if d["metadata"]["name"] == budget["metadata"]["name"])
    labels = standalone["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 0 < budget["spec"]["minAvailable"] < standalone["spec"]["replicas"]


def test_network_policies_admit_the_metrics_port_from_the_scrapers_only() -> None:
    """Each Deployment's pods have one ingress policy: the port "metrics" only from the
    Prometheus pods of `monitoring`, and a rule for every other port its containers serve
    (a policy that selects a pod closes what it does not list)."""
    scrapers = {"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    policies = of_kind("NetworkPolicy")
    for deployment in of_kind("Deployment"):
        template = deployment["spec"]["template"]
        labels = template["metadata"]["labels"].items()
        (policy,) = [p for p in policies
                     if p["spec"]["podSelector"]["matchLabels"].items() <= labels]
        spec = policy["spec"]
        assert spec["policyTypes"] == ["Ingress"]  # the dispatcher's egress stays open
        admitted: dict[str, list[Any]] = {}
        for rule in spec["ingress"]:
            for port in rule["ports"]:
                assert port["protocol"] == "TCP"
                admitted.setdefault(port["port"], []).extend(rule["from"])
        assert admitted.pop("metrics") == [scrapers]
        served = {port["name"] for container in template["spec"]["containers"]
                  for port in container.get("ports", [])}
        assert "metrics" in served
        assert set(admitted) == served - {"metrics"}, deployment["metadata"]["name"]
    assert len(policies) == len(of_kind("Deployment"))


def test_pod_monitor_scrapes_every_dispatcher_as_the_rules_job() -> None:
    """The PodMonitor selects both kinds of pod, on the port "metrics", under the rules' job."""
    (monitor,) = of_kind("PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert set(spec) <= PODMONITOR_FIELDS
    validate = pytest.importorskip("kubernetes_validate.utils", reason="in the test extras")
    # Its metadata and selector are Kubernetes' own types: checked with their schemas.
    for kind_doc in ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": monitor["metadata"]},
                     {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                      "metadata": {"name": "x"}, "spec": {"selector": spec["selector"]}}):
        validate.validate(kind_doc, validate.latest_version(), strict=True)
    selected = spec["selector"]["matchLabels"].items()
    for deployment in of_kind("Deployment"):
        assert selected <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (endpoint,) = spec["podMetricsEndpoints"]
    assert set(endpoint) <= ENDPOINT_FIELDS
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    assert parse_duration(endpoint["scrapeTimeout"]) <= parse_duration(endpoint["interval"])
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert all(set(r) <= RELABEL_FIELDS for r in endpoint["relabelings"])
    alerts = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    assert f'job="{relabel["job"]["replacement"]}"' in alerts
