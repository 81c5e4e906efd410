"""The roles of docs/upgrading.md, made for real in a database of their own.

The operator owns a schema made for it beforehand (PUBLIC may create nothing
in the database, nor in ``public``); ``setup`` migrates as the operator,
applies the grants ``outbox grants`` prints (twice: a second run changes
nothing) and adds two endpoints.
"""

from __future__ import annotations

import hmac
import itertools
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support.cli import run_outbox

_counter = itertools.count()
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


_SECRET = secrets.token_hex(16)


def role_password(role: str) -> str:
    """The password of a role a test makes: the throwaway cluster asks every role for one
    over TCP (scram), and this one is known only to this test process."""
    return hmac.new(_SECRET.encode(), role.encode(), "sha256").hexdigest()


def create_role(admin: psycopg.Connection[Any], role: str) -> None:
    """``CREATE ROLE role LOGIN`` with its :func:`role_password`."""
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
        sql.Identifier(role), sql.Literal(role_password(role))))


def role_dsn(dsn: str, role: str) -> str:
    """``dsn`` (the cluster's, for some database) as ``role``, with its password."""
    return psycopg.conninfo.make_conninfo(dsn, user=role, password=role_password(role))


@contextmanager
def login_role(cluster: Cluster, prefix: str = "stranger") -> Iterator[str]:
    """A new role that may log in and holds nothing but PUBLIC's rights; dropped afterwards."""
    role = f"{prefix}_{os.getpid()}_{next(_counter)}"
    with cluster.admin() as admin:
        create_role(admin, role)
    try:
        yield role
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


class Roles:
    def __init__(self, cluster: Cluster, database: str, suffix: str) -> None:
        self.cluster, self.database = cluster, database
        self.operator, self.application, self.dispatcher, self.manager = (
            f"{who}_{suffix}" for who in ("operator", "application", "dispatcher", "manager"))

    def dsn(self, role: str) -> str:
        return role_dsn(self.cluster.dsn_for(self.database), role)

    def connect(self, role: str) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(role))


@pytest.fixture
def roles(cluster: Cluster) -> Iterator[Roles]:
    suffix = f"{os.getpid()}_{next(_counter)}"
    made = Roles(cluster, f"roles_{suffix}", suffix)
    every = (made.operator, made.application, made.dispatcher, made.manager)
    names = [sql.Identifier(r) for r in every]
    with cluster.admin() as admin:
        for role in every:
            create_role(admin, role)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(made.database)))
    with psycopg.connect(cluster.dsn_for(made.database), autocommit=True) as owner:
        # PUBLIC may not create in the database (nor, since PostgreSQL 15, in public).
        owner.execute(sql.SQL("REVOKE CREATE, TEMPORARY ON DATABASE {} FROM PUBLIC").format(
            sql.Identifier(made.database)))
        owner.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        owner.execute(sql.SQL("CREATE SCHEMA outbox AUTHORIZATION {}").format(names[0]))
        owner.execute("CREATE TABLE public.orders (id int)")
    try:
        yield made
    finally:
        drop_database_and_roles(cluster, made.database, names)


def drop_database_and_roles(cluster: Cluster, database: str,
                            roles: Iterable[str | sql.Identifier]) -> None:
    """A test's own database, then its roles (which own nothing once it is gone)."""
    with cluster.admin() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(database)))
        for role in roles:
            name = role if isinstance(role, sql.Identifier) else sql.Identifier(role)
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(name))


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def setup(roles: Roles, receiver: Receiver) -> None:
    op = roles.dsn(roles.operator)
    ok(run_outbox(op, "migrate"))
    grants = ok(run_outbox(None, "grants", "--application", roles.application,
                            "--dispatcher", roles.dispatcher))
    with psycopg.connect(op, autocommit=True) as conn:
        for _ in range(2):  # run again after every migrate: still exactly the same
            conn.execute(grants.encode())
    ok(run_outbox(op, "endpoints", "add", "rx", "--url", receiver.url + "ok",
                   "--events", "order.*", "--secret", SECRET, "--max-pending", "100"))
    ok(run_outbox(op, "endpoints", "add", "gone", "--url", receiver.url + "gone",
                   "--events", "audit.*"))


