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
import os
import subprocess
import sys
from collections.abc import Iterator
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
from tests.support.dispatcher import run_once
from tests.support.roles import create_role, role_dsn

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


@pytest.fixture
def database(cluster: Cluster) -> Iterator[tuple[str, dict[str, str]]]:
    """A database with the manifests' three roles (renamed) and the schema the owner owns."""
    suffix = f"{os.getpid()}_{next(_counter)}"
    renamed = {user: f"{user}_{suffix}" for user in secret_users().values()}
    name = f"deploy_{suffix}"
    with cluster.admin() as admin:
        for role in renamed.values():
            create_role(admin, role)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    owner = renamed[secret_users()["migrate-dsn"]]
    with psycopg.connect(cluster.dsn_for(name), autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE CREATE, TEMPORARY ON DATABASE {} FROM PUBLIC").format(
            sql.Identifier(name)))
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute(sql.SQL("CREATE SCHEMA outbox AUTHORIZATION {}").format(
            sql.Identifier(owner)))
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
