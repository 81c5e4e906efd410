"""Shared fixtures: a real PostgreSQL for the whole session, a fresh database per test.

The session starts one throwaway cluster (``outbox.testing.TemporaryPostgres``)
unless ``OUTBOX_TEST_DSN`` names an external server (a superuser URL). It
migrates a template database once; each test gets its own database cloned
from it (about 20 ms on tmpfs) and dropped afterwards ``WITH (FORCE)``.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import settings
from psycopg import sql

from outbox.migrate import migrate
from outbox.testing import Receiver, TemporaryPostgres

# Fixtures shared by several test modules, kept beside their helpers.
pytest_plugins = ["tests.support.resilience", "tests.support.faults", "tests.support.receiving",
                  "tests.support.roles"]

# The property tests draw the same cases on every run, so that CI's verdict on a
# commit is the commit's, not the draw's. HYPOTHESIS_PROFILE=explore draws anew
# (and keeps failures found in .hypothesis/ to replay them).
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# A suite started in the background (nohup, `./dev test &` in a script) inherits SIGINT
# ignored, and so would every command it starts, since an ignored signal stays ignored
# across exec: the tests that interrupt a command would wait for it in vain. A handler
# of this process's own is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(signum: int, _frame: object) -> None:
    """SIGTERM (a CI job cancelled, `kill`, a supervisor) ends the run as Ctrl-C does, so that
    the fixtures' finalisers run: the throwaway cluster stops and its directory goes."""
    signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM ends the run at once
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _interrupted)

_TEMPLATE = "outbox_template"
_counter = itertools.count()


class Cluster:
    """The server under test: DSNs by database name, and (when ours) stop/start."""

    def __init__(self, admin_dsn: str, server: TemporaryPostgres | None) -> None:
        self.admin_dsn = admin_dsn
        self.server = server

    def dsn_for(self, dbname: str) -> str:
        return psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=dbname)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_dsn, autocommit=True)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    external = os.environ.get("OUTBOX_TEST_DSN")
    if external:
        yield Cluster(external, None)
        return
    # A few prepared transactions allowed (PostgreSQL's default is none), for the test
    # that `outbox status` names one holding the horizon.
    with TemporaryPostgres(settings={"max_prepared_transactions": "4"}) as server:
        yield Cluster(server.dsn, server)


@pytest.fixture(scope="session")
def template_db(cluster: Cluster) -> str:
    name = f"{_TEMPLATE}_{os.getpid()}"
    with cluster.admin() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(cluster.dsn_for(name)) as conn:
        migrate(conn)
    return name


@pytest.fixture
def fresh_db(cluster: Cluster, template_db: str) -> Iterator[str]:
    """The name of a new, migrated database for this test only."""
    name = f"t_{os.getpid()}_{next(_counter)}"
    with cluster.admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template_db)))
    try:
        yield name
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


@pytest.fixture
def dsn(cluster: Cluster, fresh_db: str) -> str:
    """A libpq URL of a fresh, migrated database."""
    return cluster.dsn_for(fresh_db)


@pytest.fixture
def empty_dsn(cluster: Cluster) -> Iterator[str]:
    """A libpq URL of a new database without the outbox schema (not from the template)."""
    name = f"empty_{os.getpid()}_{next(_counter)}"
    with cluster.admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield cluster.dsn_for(name)
    finally:
        with cluster.admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A psycopg connection (not autocommit) to the test's fresh database."""
    with psycopg.connect(dsn) as connection:
        yield connection


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real HTTP server on 127.0.0.1 that records requests; set ``.responder`` to script it."""
    with Receiver() as rx:
        yield rx
