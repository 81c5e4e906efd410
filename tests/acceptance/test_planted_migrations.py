"""Every route that makes or upgrades the schema binds only pg_catalog's code into it.

A role with no grants plants look-alikes of the built-in operators and
functions in ``public`` (PUBLIC may create there, as on PostgreSQL 14;
tests/support/planted.py). On the default search_path (``"$user", public``:
``pg_catalog`` is searched first) the mixed-type ones bind, ``public.>(double
precision, integer)`` for ``timeout_seconds > 0``; on a path that names
``public`` before ``pg_catalog``, the others too (the planted functions are
not IMMUTABLE: in an index predicate they make the statement fail instead).
The operator, who owns the schema ``outbox``, then makes or upgrades it by
each route a user has: the script of ``outbox migrate --sql`` under ``psql
-f`` or inside one transaction of a driver (as Alembic or Django run it),
``psql -f schema.sql``, and the Python ``migrate`` on a connection of its
own. ``pg_depend`` must then show nothing of the schema bound to the planted
code, the session's search_path must be what it was, and writing every table
must run none of it.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from outbox.migrate import migrate, script
from outbox.sql import Step, steps
from tests.conftest import Cluster
from tests.support import planted
from tests.support.cli import run_outbox
from tests.support.psql import find_psql
from tests.support.releases import releases
from tests.support.roles import create_role, drop_database_and_roles, ok, role_dsn

_counter = itertools.count()
_PINNED = "-c search_path=pg_catalog,pg_temp"

# What depends on the code planted in public, but the planted operators' own functions.
_BOUND = """
SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid),
       pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0)
FROM pg_catalog.pg_depend d
WHERE d.classid <> 'pg_catalog.pg_operator'::pg_catalog.regclass
  AND ((d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
        AND d.refobjid IN (SELECT o.oid FROM pg_catalog.pg_operator o
                           WHERE o.oprnamespace = 'public'::pg_catalog.regnamespace))
    OR (d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
        AND d.refobjid IN (SELECT p.oid FROM pg_catalog.pg_proc p
                           WHERE p.pronamespace = 'public'::pg_catalog.regnamespace)))
ORDER BY 1, 2
"""


@dataclass
class Target:
    """A database whose schema ``outbox`` the operator owns, and a role with no grants."""

    cluster: Cluster
    database: str
    operator: str
    planter: str

    def dsn(self, role: str | None = None) -> str:
        """As ``role``; as the cluster's superuser, on a pinned path, without one."""
        own = self.cluster.dsn_for(self.database)
        if role is None:
            return psycopg.conninfo.make_conninfo(own, options=_PINNED)
        return role_dsn(own, role)

    def plant(self, search_path: str) -> None:
        """The look-alikes in public, and ``search_path`` the database's."""
        with psycopg.connect(self.dsn(self.planter), autocommit=True) as planter:
            planted.prepare(planter)
            assert planted.plant(planter, "public") > 300
            found = planter.execute(
                "SELECT pg_catalog.count(*) FROM pg_catalog.pg_operator"
                " WHERE oprnamespace = 'public'::pg_catalog.regnamespace"
                " AND oprname = '>' AND oprleft = 'double precision'::pg_catalog.regtype"
                " AND oprright = 'integer'::pg_catalog.regtype").fetchone()
            assert found == (1,)  # the one `timeout_seconds > 0` met
        with self.cluster.admin() as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} SET search_path = {}").format(
                sql.Identifier(self.database), sql.SQL(search_path)))

    def at_version(self, version: int) -> None:
        """The schema of an earlier release, upgraded to ``version``, made before planting."""
        release = max((r for r in releases() if r.version <= version), key=lambda r: r.version)
        with psycopg.connect(self.dsn(self.operator), autocommit=True) as conn:
            conn.execute(release.schema_sql().encode())
        with psycopg.connect(self.dsn(self.operator)) as conn:
            migrate(conn, available=[s for s in steps() if s.version <= version])


@pytest.fixture
def target(cluster: Cluster) -> Iterator[Target]:
    suffix = f"{os.getpid()}_{next(_counter)}"
    made = Target(cluster, f"planted_{suffix}", f"operator_{suffix}", f"planter_{suffix}")
    with cluster.admin() as admin:
        for role in (made.operator, made.planter):
            create_role(admin, role)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(made.database)))
        # An earlier release's schema.sql says CREATE SCHEMA IF NOT EXISTS.
        admin.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(made.database), sql.Identifier(made.operator)))
    with psycopg.connect(made.dsn(), autocommit=True) as superuser:
        superuser.execute(sql.SQL("CREATE SCHEMA outbox AUTHORIZATION {}").format(
            sql.Identifier(made.operator)))
        superuser.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")  # as on PostgreSQL 14
    try:
        yield made
    finally:
        drop_database_and_roles(cluster, made.database, (made.operator, made.planter))


def _psql(target: Target, *args: str) -> str:
    """psql as the operator, on the database's search_path; then its search_path."""
    psql = find_psql(target.cluster)
    if psql is None:
        pytest.skip("no psql that runs here")
    result = subprocess.run(
        [psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d",
         target.dsn(target.operator), *args, "-c", "SHOW search_path"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def _script_file(target: Target, tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "migration.sql"
    path.write_text(ok(run_outbox(target.dsn(target.operator), "migrate", "--sql", *args)))
    return path


def _by_psql_from_0(target: Target, tmp_path: Path) -> str:
    return _psql(target, "-f", str(_script_file(target, tmp_path, "--from", "0")))


def _by_psql_from_5(target: Target, tmp_path: Path) -> str:
    return _psql(target, "-f", str(_script_file(target, tmp_path)))


def _schema_sql_by_psql(target: Target, tmp_path: Path) -> str:
    return _psql(target, "-f", str(Path(__file__).resolve().parents[2] / "schema.sql"))


def _as_a_tool_from_14(target: Target, tmp_path: Path) -> str:
    """As a migration tool runs the script: each step inside the driver's transaction (as
    Alembic's), but a step marked NOT IN A TRANSACTION statement by statement, outside one
    (as a tool's non-atomic migration)."""
    text = script(14)
    with psycopg.connect(target.dsn(target.operator)) as conn:
        for step in re.split(r"\n(?=-- \d{4}_\w+: version \d+\n)", text)[1:]:
            if "-- outbox: NOT IN A TRANSACTION" not in step:
                conn.execute(step.encode())
                conn.commit()
                continue
            conn.autocommit = True
            for statement in Step(0, "step", step, transactional=False).statements():
                conn.execute(statement.encode())
            conn.autocommit = False
        return _path_of(conn)


def _python_fresh(target: Target, tmp_path: Path) -> str:
    with psycopg.connect(target.dsn(target.operator)) as conn:
        migrate(conn)
        return _path_of(conn)


def _path_of(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW search_path").fetchone()
    conn.rollback()
    assert row is not None
    return str(row[0])


ROUTES: dict[str, tuple[int, Callable[[Target, Path], str]]] = {
    "migrate-sql-from-0-by-psql": (0, _by_psql_from_0),
    "migrate-sql-from-5-by-psql": (5, _by_psql_from_5),
    "schema-sql-by-psql": (0, _schema_sql_by_psql),
    "migrate-sql-from-14-as-a-tool-runs-it": (14, _as_a_tool_from_14),
    "python-migrate-fresh": (0, _python_fresh),
    "python-migrate-from-1": (1, _python_fresh),
}


def _bound(target: Target) -> list[tuple[str, str]]:
    with psycopg.connect(target.dsn(), autocommit=True) as conn:
        return [(str(a), str(b)) for a, b in conn.execute(_BOUND).fetchall()]


def _write_every_table(target: Target) -> None:
    """As the operator, on a pinned path (nothing of the statements themselves resolves to
    public): every table written, each CHECK, default and partial index met."""
    with psycopg.connect(target.dsn(target.operator), options=_PINNED) as conn:
        row = conn.execute(
            "INSERT INTO outbox.endpoints (name, url, rate_limit, max_pending,"
            " max_pending_per_tenant, tenant, format, ca_file, client_cert, client_key)"
            " VALUES ('rx', 'http://127.0.0.1:9/', 5, 10, 5, 'acme', 'cloudevents', NULL,"
            " NULL, NULL) RETURNING id").fetchone()
        assert row is not None
        endpoint = row[0]
        conn.execute("UPDATE outbox.endpoints SET timeout_seconds = 3, breaker_rate = 60,"
                     " breaker_window_seconds = 20, min_backoff_seconds = 2 WHERE id = %s",
                     (endpoint,))
        conn.execute("UPDATE outbox.endpoint_state SET circuit = 'open' WHERE endpoint_id = %s",
                     (endpoint,))
        event = conn.execute("INSERT INTO outbox.events (id, type, payload, tenant) VALUES"
                             " (gen_random_uuid(), 'order.created', '{}', 'acme')"
                             " RETURNING id, seq").fetchone()
        assert event is not None
        delivery = conn.execute(
            "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, tenant)"
            " VALUES (%s, %s, %s, 'k', 'acme') RETURNING id", (*event, endpoint)).fetchone()
        assert delivery is not None
        conn.execute("UPDATE outbox.deliveries SET state = 'in_flight' WHERE id = %s", delivery)
        conn.execute("INSERT INTO outbox.attempts (delivery_id, attempt, reason)"
                     " VALUES (%s, 1, 'timeout')", delivery)
        conn.execute("UPDATE outbox.deliveries SET state = 'dead' WHERE id = %s", delivery)
        conn.execute("INSERT INTO outbox.dispatchers (id, host, pid, version)"
                     " VALUES (gen_random_uuid(), 'h', 1, 'v')")
        conn.execute("INSERT INTO outbox.inbox (consumer, event_id) VALUES ('c', 'e')")
        conn.commit()


@pytest.mark.parametrize("search_path", ['"$user", public', '"$user", public, pg_catalog'],
                         ids=["default-path", "public-first"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_each_route_binds_nothing_planted_and_leaves_the_path(
        route: str, search_path: str, target: Target, tmp_path: Path) -> None:
    """Under a search_path that finds planted look-alikes first, each route that makes or
    upgrades the schema binds none of them into it (pg_depend, `migrate --check`), sets the
    session's path back as it found it, and writing every table then runs none of them."""
    start, run = ROUTES[route]
    if start:
        target.at_version(start)
    target.plant(search_path)
    before = _psql(target)
    assert before == search_path

    assert run(target, tmp_path) == before
    assert _bound(target) == []
    checked = run_outbox(target.dsn(target.operator), "migrate", "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    _write_every_table(target)
    with psycopg.connect(target.dsn(), autocommit=True) as superuser:
        assert planted.runs(superuser) == [], planted.details(superuser)


def test_an_upgrade_heals_what_an_earlier_route_bound(target: Target) -> None:
    """A database an earlier release's schema.sql made on the default path of a database
    with look-alikes in public has its endpoints' CHECKs bound to them (and, made on a path
    naming public first, its time defaults); upgraded, both use pg_catalog's again, and
    writing the endpoints runs nothing planted."""
    target.plant('"$user", public')
    release = next(r for r in releases() if r.version == 5)
    with psycopg.connect(target.dsn(target.operator), autocommit=True) as conn:
        conn.execute(release.schema_sql().encode())  # the session's path: planted code found
        conn.execute("ALTER TABLE outbox.events ALTER COLUMN created_at"
                     " SET DEFAULT public.clock_timestamp()")  # as public first would
    bound = _bound(target)
    assert ("constraint endpoints_timeout_seconds_check on table outbox.endpoints",
            "operator public.>(double precision,integer)") in bound
    assert ("default value for column created_at of table outbox.events",
            "function public.clock_timestamp()") in bound

    with psycopg.connect(target.dsn(target.operator)) as conn:
        migrate(conn)
    assert _bound(target) == []
    checked = run_outbox(target.dsn(target.operator), "migrate", "--check")
    assert checked.returncode == 0, checked.stderr
    _write_every_table(target)
    with psycopg.connect(target.dsn(), autocommit=True) as superuser:
        assert planted.runs(superuser) == [], planted.details(superuser)


def test_migrate_check_names_an_object_bound_by_hand(target: Target) -> None:
    """`outbox migrate --check` exits 1 naming a constraint and a default made by hand with
    code of public, and 0 once they are made again with pg_catalog's."""
    with psycopg.connect(target.dsn(target.operator)) as conn:
        migrate(conn)
    target.plant('"$user", public')
    with psycopg.connect(target.dsn(target.operator), autocommit=True) as conn:
        conn.execute("ALTER TABLE outbox.endpoints ADD CONSTRAINT by_hand"
                     " CHECK (timeout_seconds OPERATOR(public.>) 1)")
        conn.execute("ALTER TABLE outbox.attempts ALTER COLUMN at"
                     " SET DEFAULT public.now()")
    checked = run_outbox(target.dsn(target.operator), "migrate", "--check")
    assert checked.returncode == 1, checked.stderr
    assert checked.stderr.splitlines()[:2] == [
        "error: default value for outbox.attempts.at uses function public.now()",
        "error: table constraint by_hand on outbox.endpoints uses operator "
        "public.>(double precision,integer)"]
    assert "error: 2 object(s) of the outbox schema" in checked.stderr
    migrated = run_outbox(target.dsn(target.operator), "migrate")
    assert migrated.returncode == 0  # a warning, not a failure
    assert "warning: table constraint by_hand on outbox.endpoints uses" in migrated.stderr

    with psycopg.connect(target.dsn(target.operator), options=_PINNED,
                         autocommit=True) as conn:
        conn.execute("ALTER TABLE outbox.endpoints DROP CONSTRAINT by_hand,"
                     " ADD CONSTRAINT by_hand CHECK (timeout_seconds > 1)")
        conn.execute("ALTER TABLE outbox.attempts ALTER COLUMN at SET DEFAULT now()")
    again = run_outbox(target.dsn(target.operator), "migrate", "--check")
    assert again.returncode == 0, again.stderr
