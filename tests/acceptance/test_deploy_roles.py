"""deploy/kubernetes run as written against a real PostgreSQL, each container as its own role.

The roles and the schema are made first, as the database administrator does
(docs/upgrading.md, "Roles"); then the migration Job's script runs as the
schema's owner (migrate, then apply the grants), the init container's wait
as the dispatcher's role, the application publishes as its role and the
dispatcher delivers as its own. The role names are the manifests', with a
suffix of this run's so that nothing else in the cluster is touched: the
Secret's URLs and the Job's `outbox grants` name them together, which is what
a reader changing them changes.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import yaml  # type: ignore[import-untyped]
from psycopg import sql

import outbox
from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support.cli import clean_environment, run_outbox
from tests.support.dispatcher import Dispatcher, run_once
from tests.support.roles import create_role, role_dsn, role_password

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
BIN = Path(sys.executable).parent
_counter = itertools.count()


def pod_spec(file: str) -> dict[str, Any]:
    doc = next(d for d in yaml.safe_load_all((KUBERNETES / file).read_text())
               if d and d["kind"] in ("Deployment", "Job"))
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def secret_users() -> dict[str, str]:
    """Secret key -> the role its DSN connects as."""
    secret = next(d for d in yaml.safe_load_all((KUBERNETES / "sidecar.yaml").read_text())
                  if d and d["kind"] == "Secret")
    return {key: str(urlsplit(value).username) for key, value in secret["stringData"].items()
            if key.endswith("-dsn")}


def shell(script: list[str], dsn: str, renamed: dict[str, str],
          ) -> subprocess.CompletedProcess[str]:
    """A container's sh command, the roles renamed, this environment's `outbox` on PATH."""
    argv = list(script)
    for old, new in renamed.items():
        argv[-1] = argv[-1].replace(f" {old} ", f" {new} ").replace(f" {old}\n", f" {new}\n")
    env = clean_environment({"OUTBOX_DSN": dsn})
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def make_databases(cluster: Cluster, names: list[str], roles: Iterable[str],
                   owner: str) -> None:
    """The roles, and the databases as the administrator makes them: PUBLIC may create
    nothing, and the schema ``outbox`` is the owner's."""
    with cluster.admin() as admin:
        for role in roles:
            create_role(admin, role)
        for name in names:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    for name in names:
        with psycopg.connect(cluster.dsn_for(name), autocommit=True) as conn:
            conn.execute(sql.SQL("REVOKE CREATE, TEMPORARY ON DATABASE {} FROM PUBLIC").format(
                sql.Identifier(name)))
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            conn.execute(sql.SQL("CREATE SCHEMA outbox AUTHORIZATION {}").format(
                sql.Identifier(owner)))


@pytest.fixture
def database(cluster: Cluster) -> Iterator[tuple[str, dict[str, str]]]:
    """A database with the manifests' three roles (renamed) and the schema the owner owns."""
    suffix = f"{os.getpid()}_{next(_counter)}"
    renamed = {user: f"{user}_{suffix}" for user in secret_users().values()}
    name = f"deploy_{suffix}"
    make_databases(cluster, [name], renamed.values(), renamed[secret_users()["migrate-dsn"]])
    try:
        yield cluster.dsn_for(name), renamed
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
            for role in renamed.values():
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_each_container_does_its_job_as_its_own_role(
        database: tuple[str, dict[str, str]], receiver: Receiver) -> None:
    """The Job migrates and grants as the owner; the gate, publish and delivery need no more."""
    base, renamed = database
    users = secret_users()

    def dsn(key: str) -> str:
        return role_dsn(base, renamed[users[key]])

    waiting = run_outbox(dsn("dispatcher-dsn"), "migrate", "--check")
    assert waiting.returncode == 1, waiting.stdout + waiting.stderr  # the gate waits
    job = shell(pod_spec("migrate-job.yaml")["containers"][0]["command"], dsn("migrate-dsn"),
                renamed)
    assert job.returncode == 0, job.stdout + job.stderr
    for file in ("sidecar.yaml", "standalone.yaml"):
        gate = shell(pod_spec(file)["initContainers"][0]["command"], dsn("dispatcher-dsn"),
                     renamed)
        assert gate.returncode == 0, (file, gate.stdout + gate.stderr)
    added = run_outbox(dsn("migrate-dsn"), "endpoints", "add", "rx", "--url", receiver.url)
    assert added.returncode == 0, added.stderr
    with psycopg.connect(dsn("app-dsn")) as conn:
        event_id = outbox.publish(conn, "order.created", {"n": 1})
        conn.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT secret FROM outbox.endpoints")
    code, log = run_once(dsn("dispatcher-dsn"))
    assert code == 0, log
    [request] = receiver.wait_for(1, timeout=30)
    assert request.header("webhook-id") == str(event_id)


FLEET = KUBERNETES / "fleet"


def fleet_docs() -> list[dict[str, Any]]:
    return [d for path in sorted(FLEET.glob("*.yaml"))
            for d in yaml.safe_load_all(path.read_text()) if d]


def fleet_container(kind: str) -> dict[str, Any]:
    doc = next(d for d in fleet_docs() if d["kind"] == kind)
    container: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
    return container


def fleet_env(container: dict[str, Any], renamed: dict[str, str], path: Path,
              ) -> dict[str, str]:
    """A fleet container's environment here: its file, its role (renamed) and that role's
    password where the Secret would give it."""
    plain = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    role = renamed[plain["PGUSER"]]
    return {**plain, "OUTBOX_DATABASES": str(path), "PGUSER": role,
            "PGPASSWORD": role_password(role), "OUTBOX_METRICS_HOST": "127.0.0.1",
            "OUTBOX_BLOCK_PRIVATE_NETWORKS": "false", "OUTBOX_LOG_FORMAT": "text"}


@pytest.fixture
def tenants(cluster: Cluster) -> Iterator[tuple[list[str], dict[str, str]]]:
    """Two databases with the fleet's roles (renamed), each with the schema its owner owns."""
    suffix = f"{os.getpid()}_{next(_counter)}"
    job = fleet_container("Job")
    script = job["command"][-1]
    roles = {e["value"] for d in ("Deployment", "Job")
             for e in fleet_container(d)["env"] if e["name"] == "PGUSER"}
    grants = next(shlex.split(line) for line in script.splitlines()
                  if line.startswith("outbox grants"))
    roles |= {role for option, role in itertools.pairwise(grants)
              if option in ("--application", "--dispatcher", "--viewer")}
    renamed = {role: f"{role}_{suffix}" for role in roles}
    owner = renamed[next(e["value"] for e in job["env"] if e["name"] == "PGUSER")]
    names = [f"fleet_deploy_{suffix}_{n}" for n in range(2)]
    make_databases(cluster, names, renamed.values(), owner)
    try:
        yield [cluster.dsn_for(name) for name in names], renamed
    finally:
        with cluster.admin() as admin:
            for name in names:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(name)))
            for role in renamed.values():
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_the_fleet_migrates_and_serves_each_database_as_its_own_role(
        tenants: tuple[list[str], dict[str, str]], receiver: Receiver,
        tmp_path: Path) -> None:
    """deploy/kubernetes/fleet as written: one file of DSNs without a user; the Job's script
    migrates and grants every database as the owner (PGUSER), the fleet's dispatcher serves
    them as its role, a viewer reads `status --all` as its own."""
    dsns, renamed = tenants
    path = tmp_path / "databases.toml"
    lines = ['refresh = "60s"']
    for n, dsn in enumerate(dsns):
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
        bare = psycopg.conninfo.make_conninfo(host=parts["host"], port=parts["port"],
                                               dbname=parts["dbname"])
        lines += ["[[database]]", f'name = "tenant-{n}"', f"dsn = {bare!r}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    job = fleet_container("Job")
    script = job["command"][-1]
    for old, new in renamed.items():
        script = script.replace(f" {old} ", f" {new} ")
    env = clean_environment(fleet_env(job, renamed, path))
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    done = subprocess.run([*job["command"][:-1], script], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    owner = renamed[next(e["value"] for e in job["env"] if e["name"] == "PGUSER")]
    for dsn in dsns:
        added = run_outbox(role_dsn(dsn, owner), "endpoints", "add", "rx", "--url",
                           receiver.url)
        assert added.returncode == 0, added.stderr
    app = renamed["app"]
    published = set()
    for dsn in dsns:
        with psycopg.connect(role_dsn(dsn, app)) as conn:
            published.add(str(outbox.publish(conn, "order.created", {"n": 1})))
            conn.commit()
    fleet = fleet_env(fleet_container("Deployment"), renamed, path)
    with Dispatcher(None, env=fleet) as dispatcher:
        got = receiver.wait_for(2, timeout=60)
        assert {r.header("webhook-id") for r in got} == published, dispatcher.log()
    viewer = next(role for old, role in renamed.items() if "viewer" in old)
    shown = run_outbox(None, "status", "--all", "--json", env={
        "OUTBOX_DATABASES": str(path), "PGUSER": viewer, "PGPASSWORD": role_password(viewer)})
    assert shown.returncode == 0, shown.stderr
    states = {row["database"]: row["state"] for row in json.loads(shown.stdout)["databases"]}
    assert states == {"tenant-0": "ok", "tenant-1": "ok"}, shown.stdout
