"""deploy/kubernetes: valid by the Kubernetes schemas, restricted pods, in step with the image."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from psycopg.conninfo import conninfo_to_dict

from dispatcher.cli import build_config
from outbox.endpoints import EndpointSpec, decode_secret
from outbox.errors import InvalidEndpoint
from tests.support.kubernetes import restricted_problems
from tests.support.prometheus import parse_duration
from tests.unit.test_deploy_release import release

yaml = pytest.importorskip("yaml", reason="PyYAML is part of the test extras")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
IMAGE = f"registry.example.com/shop/outbox-dispatcher:{release()}"
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


def dispatchers() -> list[dict[str, Any]]:
    """The Deployments that run a dispatcher (web.yaml's runs the web view)."""
    return [d for d in of_kind("Deployment") if d["metadata"]["name"] != "outbox-web"]


def pod_templates() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, pod template) of every Deployment and Job."""
    for doc in documents():
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]


def ours(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's containers and init containers that run the dispatcher image."""
    return [c for c in pod.get("initContainers", []) + pod["containers"] if c["image"] == IMAGE]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def secret_key(container: dict[str, Any], name: str = "OUTBOX_DSN") -> str:
    """The key of the Secret a container's variable comes from (the Secret is ours)."""
    ref = env_of(container)[name]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == of_kind("Secret")[0]["metadata"]["name"], ref
    key: str = ref["key"]
    return key


def migration_script() -> list[list[str]]:
    """The migration Job's commands, one word list per line of its ``sh -ec`` script."""
    job = of_kind("Job")[0]["spec"]["template"]["spec"]
    (container,) = job["containers"]
    shell, flags, script = container["command"]
    assert (shell, flags) == ("sh", "-ec")
    return [shlex.split(line) for line in script.splitlines() if line.strip()]


def dsn_user(key: str) -> str:
    user = urlsplit(of_kind("Secret")[0]["stringData"][key]).username
    assert user, key
    return user


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


def test_every_pod_meets_the_restricted_profile_without_a_token() -> None:
    """Every pod spec of deploy/kubernetes passes Pod Security "restricted"; none gets a token."""
    templates = dict(pod_templates())
    job = "outbox-migrate-" + release().replace(".", "-")
    assert set(templates) == {"orders", "outbox-dispatcher", job, "outbox-web"}
    for name, template in templates.items():
        pod = template["spec"]
        assert restricted_problems(pod) == [], name
        assert pod["automountServiceAccountToken"] is False, name


def test_the_migration_job_is_named_for_the_release_of_its_image() -> None:
    """The Job (renamed for every release, as a finished Job is not run again) carries the
    version of the image it runs, and the README's wait names that Job."""
    (job,) = of_kind("Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    release = container["image"].rpartition(":")[2]
    assert job["metadata"]["name"] == "outbox-migrate-" + release.replace(".", "-")
    assert f"job/{job['metadata']['name']}" in (DEPLOY / "README.md").read_text()


def test_the_restricted_check_finds_what_the_profile_refuses() -> None:
    """The check names each broken rule: escalation, capabilities, root, seccomp, host access."""
    good = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
            "volumes": [{"name": "tmp", "emptyDir": {}}]}
    assert restricted_problems(good) == []
    bare = {**good, "containers": [{"name": "app"}]}  # the sidecar's app container as it was
    assert restricted_problems(bare) == [
        "container app: allowPrivilegeEscalation must be false",
        "container app: capabilities must drop ALL"]
    context = {"allowPrivilegeEscalation": False, "runAsUser": 0, "runAsNonRoot": False,
               "seccompProfile": {"type": "Unconfined"},
               "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}
    hostile = {"hostNetwork": True, "securityContext": {},
               "initContainers": [{"name": "init", "securityContext": context,
                                   "ports": [{"containerPort": 80, "hostPort": 80}]}],
               "containers": [], "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    assert restricted_problems(hostile) == [
        "pod: hostNetwork must be false",
        "volume root: type ['hostPath'] is not allowed",
        "container init: runAsUser must not be 0",
        "container init: seccompProfile Unconfined is not allowed",
        "container init: runAsNonRoot must be true (in the pod or the container)",
        "container init: seccompProfile must be RuntimeDefault or Localhost "
        "(in the pod or the container)",
        "container init: capabilities may add only NET_BIND_SERVICE, not ['NET_ADMIN']",
        "container init: hostPort must not be set"]


def test_our_containers_run_as_the_image_user_read_only() -> None:
    """The dispatcher image's containers: its user, read-only root, an emptyDir on /tmp."""
    uid = dockerfile_user()
    for name, template in pod_templates():
        pod = template["spec"]
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


def test_each_container_connects_as_its_own_role() -> None:
    """Three DSN keys, three roles: the Job's, no superuser's, migrates and grants the others."""
    secret = of_kind("Secret")[0]
    assert {"app-dsn", "dispatcher-dsn", "migrate-dsn"} <= set(secret["stringData"])
    assert "dsn" not in secret["stringData"]
    for deployment in dispatchers():
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["initContainers"] + pod["containers"]:
            expected = "dispatcher-dsn" if container["image"] == IMAGE else "app-dsn"
            assert secret_key(container) == expected, container["name"]
    job = of_kind("Job")[0]["spec"]["template"]["spec"]
    assert secret_key(job["containers"][0]) == "migrate-dsn"
    owner, application, dispatcher = (dsn_user(k) for k in ("migrate-dsn", "app-dsn",
                                                            "dispatcher-dsn"))
    assert len({owner, application, dispatcher}) == 3
    assert owner != "postgres"
    migrate, grants = migration_script()
    assert migrate == ["outbox", "migrate"]
    assert grants == ["outbox", "grants", "--application", application,
                      "--dispatcher", dispatcher, "--apply"]


def test_the_example_signing_secret_is_a_placeholder_that_is_refused() -> None:
    """The Secret's whsec_ value is refused by `outbox endpoints add` and by the dispatcher."""
    (deployment,) = (d for d in dispatchers() if d["metadata"]["name"] == "orders")
    sidecar = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "outbox-dispatcher")
    key = secret_key(sidecar, "OUTBOX_SECRET_WORKFLOW")
    placeholder = of_kind("Secret")[0]["stringData"][key]
    assert placeholder.startswith("whsec_REPLACE_ME"), placeholder
    with pytest.raises(InvalidEndpoint, match="whsec_ secret is not base64"):
        EndpointSpec.from_options("workflow", {"url": "https://workflow.example/",
                                               "secret": placeholder})
    with pytest.raises(InvalidEndpoint, match="OUTBOX_SECRET_WORKFLOW is not base64"):
        decode_secret("env:OUTBOX_SECRET_WORKFLOW", {"OUTBOX_SECRET_WORKFLOW": placeholder})


def test_only_the_standalone_example_blocks_private_networks() -> None:
    """standalone.yaml turns the SSRF guard on as the dispatcher reads it; the sidecar does not."""
    for deployment in dispatchers():
        pod = deployment["spec"]["template"]["spec"]
        dispatcher = next(c for c in pod["containers"] if c["name"] == "outbox-dispatcher")
        environ = {name: e["value"] for name, e in env_of(dispatcher).items() if "value" in e}
        config = build_config([], {**environ, "OUTBOX_DSN": "postgresql://x@127.0.0.1/x"})
        standalone = deployment["metadata"]["name"] == "outbox-dispatcher"
        assert config.block_private_networks is standalone, deployment["metadata"]["name"]


def test_commands_follow_the_image_and_the_migration_gate() -> None:
    """The dispatcher runs the image's entry point; init containers wait on migrate --check."""
    entrypoint = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", DOCKERFILE.read_text(), re.M)
    assert entrypoint == ['["outbox-dispatcher"]']
    job = of_kind("Job")[0]["spec"]["template"]["spec"]
    assert migration_script()[0] == ["outbox", "migrate"]
    assert job["restartPolicy"] in ("OnFailure", "Never")
    deployments = dispatchers()
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
    for deployment in dispatchers():
        pod = deployment["spec"]["template"]["spec"]
        sidecar = next(c for c in pod["containers"] if c["name"] == "outbox-dispatcher")
        env = env_of(sidecar)
        assert secret_key(sidecar) in secret["stringData"]
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
    standalone = next(d for d in dispatchers()
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
    for deployment in dispatchers():
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
    assert len(policies) == len(dispatchers())


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
    for deployment in dispatchers():
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


def test_the_web_view_is_read_only_as_the_viewer_behind_a_password() -> None:
    """web.yaml runs `outbox web` on 0.0.0.0 without --allow-actions, as the viewer role
    (its DSN from a Secret), with OUTBOX_WEB_PASSWORD from a Secret, behind a Service; the
    options parse as the command reads them."""
    (web,) = (d for d in of_kind("Deployment") if d["metadata"]["name"] == "outbox-web")
    pod = web["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    command = container["command"]
    assert command[:2] == ["outbox", "web"]
    assert "--allow-actions" not in command
    assert "--no-password" not in command
    from outbox.cli import build_parser
    args = build_parser().parse_args(command[1:])
    assert args.listen == ("0.0.0.0", 8080)
    assert args.allow_actions is False
    env = env_of(container)
    secrets = {doc["metadata"]["name"]: doc for doc in of_kind("Secret")}
    refs = {name: env[name]["valueFrom"]["secretKeyRef"]
            for name in ("OUTBOX_DSN", "OUTBOX_WEB_PASSWORD")}
    for ref in refs.values():
        assert ref["key"] in secrets[ref["name"]]["stringData"], ref
    dsn = secrets[refs["OUTBOX_DSN"]["name"]]["stringData"][refs["OUTBOX_DSN"]["key"]]
    viewer = urlsplit(dsn).username
    assert viewer not in {dsn_user(k) for k in ("migrate-dsn", "app-dsn", "dispatcher-dsn")}
    assert f"--viewer {viewer}" in (KUBERNETES / "web.yaml").read_text()
    password = secrets[refs["OUTBOX_WEB_PASSWORD"]["name"]]["stringData"][
        refs["OUTBOX_WEB_PASSWORD"]["key"]]
    assert password == ""  # refused at start until the operator sets one
    (port,) = container["ports"]
    (service,) = (s for s in of_kind("Service") if s["metadata"]["name"] == "outbox-web")
    labels = web["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= labels
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [port["name"]]
    assert "outbox-dispatcher/scrape" not in dict(labels)  # no metrics port to scrape


FLEET = KUBERNETES / "fleet"


def fleet_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(FLEET.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def fleet_of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in fleet_documents() if doc["kind"] == kind]


def fleet_pods() -> dict[str, dict[str, Any]]:
    """The fleet's Deployment and Job, by name: their pod specs."""
    return {doc["metadata"]["name"]: doc["spec"]["template"]["spec"]
            for doc in fleet_documents() if doc["kind"] in ("Deployment", "Job")}


def fleet_file(tmp_path: Path, container: dict[str, Any], pod: dict[str, Any]) -> Path:
    """The databases file a fleet container reads at OUTBOX_DATABASES: the ConfigMap's key
    its volume mounts there, written out."""
    path = Path(env_of(container)["OUTBOX_DATABASES"]["value"])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    (config,) = fleet_of_kind("ConfigMap")
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    written = tmp_path / path.name
    written.write_text(config["data"][path.name])
    return written


def test_the_fleet_manifests_are_valid_and_restricted() -> None:
    """deploy/kubernetes/fleet: strict Kubernetes schemas, Pod Security "restricted", the
    image's user on a read-only root with /tmp, no token."""
    validate = pytest.importorskip("kubernetes_validate.utils", reason="in the test extras")
    versions = validate.all_versions()
    for doc in fleet_documents():
        for version in (versions[0], versions[-1]):
            validate.validate(doc, version, strict=True)
    assert {d["kind"] for d in fleet_documents()} == {
        "ConfigMap", "Secret", "Deployment", "Job", "PodDisruptionBudget", "NetworkPolicy"}
    uid = dockerfile_user()
    for name, pod in fleet_pods().items():
        assert restricted_problems(pod) == [], name
        assert pod["automountServiceAccountToken"] is False
        (container,) = pod["containers"]
        assert container["image"] == IMAGE
        context = container["securityContext"]
        assert (context["runAsUser"], context["readOnlyRootFilesystem"]) == (uid, True)
        tmp = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        assert {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/tmp"] in tmp


def test_the_fleet_serves_the_configmaps_file_as_its_own_role(tmp_path: Path) -> None:
    """The fleet's dispatcher reads OUTBOX_DATABASES from the ConfigMap (a file the
    dispatcher accepts, whose DSNs name no user or password) and logs in as PGUSER with the
    Secret's PGPASSWORD; it probes health and readiness, and is scraped and kept by a
    disruption budget."""
    from outbox._shared.databases import load

    (deployment,) = fleet_of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert not {"command", "args"} & set(container)
    env = env_of(container)
    environ = {name: e["value"] for name, e in env.items() if "value" in e}
    path = fleet_file(tmp_path, container, pod)
    config = build_config([], {**environ, "OUTBOX_DATABASES": str(path)})
    assert config.databases == str(path)
    assert config.dsn == ""
    listed = load(path, {}).databases
    assert len(listed) >= 2
    for database in listed:
        parts = conninfo_to_dict(database.dsn)
        assert not {"user", "password"} & set(parts), database.name
    assert environ["PGUSER"] == "outbox_dispatcher"
    (secret,) = fleet_of_kind("Secret")
    ref = env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret["stringData"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert pod["terminationGracePeriodSeconds"] > float(environ["OUTBOX_SHUTDOWN_GRACE"])
    labels = deployment["spec"]["template"]["metadata"]["labels"].items()
    (monitor,) = of_kind("PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels
    (budget,) = fleet_of_kind("PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels
    assert 0 < budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    (policy,) = fleet_of_kind("NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [
        "metrics"]


def test_the_fleets_job_migrates_and_grants_every_database_as_the_owner(
        tmp_path: Path) -> None:
    """The fleet's Job runs `outbox migrate --all` and `outbox grants --all --apply` over the
    same file, as the schemas' owner; the grants name the dispatcher's PGUSER."""
    from outbox.cli import build_parser

    (job,) = fleet_of_kind("Job")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    shell, flags, script = container["command"]
    assert (shell, flags) == ("sh", "-ec")
    migrate, grants = (shlex.split(line) for line in script.splitlines() if line.strip())
    assert migrate == ["outbox", "migrate", "--all"]
    parsed = build_parser().parse_args(grants[1:])
    assert (parsed.all, parsed.apply) == (True, True)
    env = env_of(container)
    (deployment,) = fleet_of_kind("Deployment")
    (dispatcher,) = deployment["spec"]["template"]["spec"]["containers"]
    assert parsed.dispatcher == env_of(dispatcher)["PGUSER"]["value"]
    owner = env["PGUSER"]["value"]
    assert owner not in {parsed.dispatcher, parsed.application, parsed.viewer, "postgres"}
    assert env["OUTBOX_DATABASES"] == env_of(dispatcher)["OUTBOX_DATABASES"]
    fleet_file(tmp_path, container, pod)
    release = container["image"].rpartition(":")[2]
    assert job["metadata"]["name"] == "outbox-migrate-fleet-" + release.replace(".", "-")
