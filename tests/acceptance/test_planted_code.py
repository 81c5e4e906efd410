"""What a role that may create in `public` plants never runs as the dispatcher, the operator
or the viewer, whatever search_path their sessions would have had.

The roles are made as docs/upgrading.md ("Roles") makes them, but the way
databases are often made in the field: the application owns the database
(``createdb -O app``), keeps CREATE on ``public`` (PUBLIC has it too, as on
PostgreSQL 14), makes schemas named after the other roles, and sets the
database's search_path so that ``public`` comes before ``pg_catalog``. It
plants look-alikes of the built-in operators and functions
(tests/support/planted.py) that record who ran them.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox.testing import Receiver, Response
from tests.conftest import Cluster
from tests.support import planted
from tests.support.cli import run_outbox
from tests.support.dispatcher import Dispatcher, run_once, wait_until
from tests.support.roles import create_role, drop_database_and_roles, ok, role_dsn
from tests.support.web import web_client

_counter = itertools.count()
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Owned:
    """A database the application owns, and the four roles' names and DSNs."""

    cluster: Cluster
    database: str
    operator: str
    application: str
    dispatcher: str
    viewer: str

    def dsn(self, role: str) -> str:
        return role_dsn(self.cluster.dsn_for(self.database), role)


@pytest.fixture
def owned(cluster: Cluster) -> Iterator[Owned]:
    suffix = f"{os.getpid()}_{next(_counter)}"
    made = Owned(cluster, f"owned_{suffix}", *(f"{who}_{suffix}" for who in (
        "operator", "application", "dispatcher", "viewer")))
    roles = (made.operator, made.application, made.dispatcher, made.viewer)
    with cluster.admin() as admin:
        for role in roles:
            create_role(admin, role)
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
            sql.Identifier(made.database), sql.Identifier(made.application)))
        admin.execute(sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(
            sql.Identifier(made.database)))
    with psycopg.connect(cluster.dsn_for(made.database), autocommit=True) as superuser:
        superuser.execute(sql.SQL("CREATE SCHEMA outbox AUTHORIZATION {}").format(
            sql.Identifier(made.operator)))
        superuser.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")  # as on PostgreSQL 14
    try:
        yield made
    finally:
        drop_database_and_roles(cluster, made.database, roles)


def _plant(owned: Owned) -> list[str]:
    """The application plants in public and in a schema named after each other role, and
    puts them first on the database's search_path; the schemas planted in."""
    schemas = ["public", owned.dispatcher, owned.operator, owned.viewer]
    with psycopg.connect(owned.dsn(owned.application), autocommit=True) as app:
        planted.prepare(app)
        for schema in schemas[1:]:
            app.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for schema in schemas:
            assert planted.plant(app, schema) > 300
        app.execute(sql.SQL('ALTER DATABASE {} SET search_path = "$user", public, pg_catalog')
                    .format(sql.Identifier(owned.database)))
    return schemas


def _publish(owned: Owned, count: int) -> list[uuid.UUID]:
    with psycopg.connect(owned.dsn(owned.application)) as app:
        ids = [outbox.publish(app, "order.created", {"n": n}, key=f"customer-{n % 3}",
                              tenant=f"tenant-{n % 2}") for n in range(count)]
        ids.append(outbox.publish(app, "order.refused", {"n": -1}, tenant="tenant-0"))
        app.commit()
    return ids


def test_nothing_planted_runs_as_the_dispatcher_the_operator_or_the_viewer(
        owned: Owned, receiver: Receiver) -> None:
    """Planted look-alikes of every built-in operator and function the statements could
    meet never run during a dispatcher's deliveries, the operator's and the viewer's
    commands, or the web view's pages; an unpinned session of the same role runs them."""
    receiver.responder = lambda r: Response(400 if r.path == "/refused" else 200)
    op, viewer = owned.dsn(owned.operator), owned.dsn(owned.viewer)
    ok(run_outbox(op, "migrate"))
    ok(run_outbox(op, "grants", "--application", owned.application, "--dispatcher",
                  owned.dispatcher, "--viewer", owned.viewer, "--apply"))
    ok(run_outbox(op, "endpoints", "add", "rx", "--url", receiver.url + "rx", "--events",
                  "order.created", "--secret", SECRET, "--rate-limit", "500",
                  "--max-pending-per-tenant", "100", "--breaker-failures", "5"))
    ok(run_outbox(op, "endpoints", "add", "refused", "--url", receiver.url + "refused",
                  "--events", "order.refused", "--max-attempts", "1"))
    schemas = _plant(owned)
    ids = _publish(owned, 6)

    code, log = run_once(owned.dsn(owned.dispatcher))
    assert code == 1, log  # the refused event is dead: everything else was delivered
    assert len([r for r in receiver.requests if r.path == "/rx"]) == 6
    with Dispatcher(owned.dsn(owned.dispatcher)) as running:  # listener, maintenance, metrics
        running.wait_serving()
        more = _publish(owned, 1)
        assert running.get("/metrics").status_code == 200
        wait_until(lambda: len([r for r in receiver.requests if r.path == "/rx"]) == 7 or None)
    event, dead = str(ids[0]), str(ids[-1])
    for dsn in (op, viewer):
        for args in (("status",), ("status", "--tenants", "--json"), ("dead", "list"),
                     ("dead", "list", "--json", "--tenant", "tenant-0"), ("show", event),
                     ("show", dead, "--json"), ("events", "list", "--type", "order.*"),
                     ("events", "list", "--key", "customer-1", "--json"),
                     ("endpoints", "retry-now", "rx", "--dry-run")):
            ok(run_outbox(dsn, *args))
    for args in (("show", event, "--payload"), ("endpoints", "list", "--json"),
                 ("endpoints", "show", "rx"), ("migrate", "--check"),
                 ("replay", "--endpoint", "rx", "--event-id", event, "--dry-run"),
                 ("replay", "--endpoint", "rx", "--since", "1h", "--type", "order.*"),
                 ("dead", "retry", "--all", "--dry-run"), ("dead", "retry", "--all"),
                 ("purge", "--older-than", "1d"),
                 ("purge", "--older-than", "1s", "--dry-run"),
                 ("dead", "discard", "--all", "--dry-run"), ("migrate",),
                 ("endpoints", "update", "rx", "--max-in-flight", "3", "--max-pending", "50"),
                 ("endpoints", "rotate-secret", "rx", "--overlap", "1h"),
                 ("endpoints", "retry-now", "rx", "--tenant", "tenant-0"),
                 ("endpoints", "disable", "refused"), ("endpoints", "enable", "refused"),
                 ("endpoints", "add", "extra", "--url", receiver.url + "x", "--events", "x.*",
                  "--max-pending", "5"), ("endpoints", "remove", "extra")):
        result = run_outbox(op, *args)
        assert result.returncode == 0, (args, result.stderr)
    with psycopg.connect(owned.cluster.dsn_for(owned.database), autocommit=True) as su:
        ran = planted.runs(su)
        su.execute("SELECT pg_catalog.pg_stat_reset()")
    mine = {owned.dispatcher, owned.operator, owned.viewer}
    assert [run for run in ran if run[0] in mine] == []
    assert {who for who, _ in ran} <= {owned.application}

    with web_client(viewer) as client:  # read-only sessions: counted, not recorded
        for path in ("/", "/dead", f"/events/{event}", f"/events/{dead}?payload=1",
                     "/search?q=customer-1", f"/search?q={more[0]}",
                     "/dead?tenant=tenant-0&endpoint=refused", "/endpoints/rx", "/tenants",
                     "/?tenant=tenant-0", "/search?q=tenant-0", "/tenants?after=0,tenant-0"):
            for query in ("", "&format=json" if "?" in path else "?format=json"):
                response = client.get(path + query)
                assert response.status_code in (200, 303), (path, response.text)
    with psycopg.connect(viewer, autocommit=True) as unpinned:  # the control
        unpinned.execute("SET default_transaction_read_only = on")
        assert unpinned.execute("SELECT 2::numeric * 1.5::float8").fetchone() == (3.0,)
    with psycopg.connect(owned.cluster.dsn_for(owned.database), autocommit=True) as su:
        wait_until(lambda: planted.calls(su, schemas) > 0 or None)
        assert planted.calls(su, schemas) == 1
    with psycopg.connect(owned.dsn(owned.dispatcher), autocommit=True) as unpinned:
        unpinned.execute("SELECT 2::numeric * 1.5::float8")
        assert (owned.dispatcher, f"{owned.dispatcher}.*(numeric, double precision)"
                ) in planted.runs(unpinned)


def test_migrate_check_names_the_schemas_others_may_plant_in(owned: Owned) -> None:
    """`outbox migrate --check` warns of each schema on a using role's default search_path
    that another role may create in, and is silent once CREATE is revoked and the schemas
    named after the roles are gone."""
    op = owned.dsn(owned.operator)
    ok(run_outbox(op, "migrate"))
    ok(run_outbox(op, "grants", "--application", owned.application, "--dispatcher",
                  owned.dispatcher, "--viewer", owned.viewer, "--apply"))
    with psycopg.connect(owned.dsn(owned.application), autocommit=True) as app:
        app.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(owned.dispatcher)))
        app.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO PUBLIC").format(
            sql.Identifier(owned.dispatcher)))
    checked = run_outbox(op, "migrate", "--check")
    assert checked.returncode == 0, checked.stderr
    lines = checked.stderr.splitlines()
    public = next(line for line in lines if line.startswith("warning: schema public "))
    assert owned.dispatcher in public
    assert owned.viewer in public
    assert "PUBLIC" in public
    assert owned.application in public  # it owns the database, so public (pg_database_owner)
    own = next(line for line in lines if line.startswith(f"warning: schema {owned.dispatcher} "))
    assert owned.application in own.split(", and ")[1]
    assert len(lines) == 2, lines
    with psycopg.connect(owned.cluster.dsn_for(owned.database), autocommit=True) as su:
        su.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        su.execute(sql.SQL("DROP SCHEMA {}").format(sql.Identifier(owned.dispatcher)))
        su.execute(sql.SQL("ALTER DATABASE {} OWNER TO CURRENT_USER").format(
            sql.Identifier(owned.database)))
    checked = run_outbox(op, "migrate", "--check")
    assert checked.returncode == 0
    assert checked.stderr == ""
