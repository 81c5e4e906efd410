"""The schema: one file in two places, applied any number of times without harm."""

from __future__ import annotations

import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import outbox
from outbox.migrate import SCHEMA_VERSION, migrate, script
from outbox.sql import queries, steps
from tests.conftest import Cluster
from tests.support.catalogue import catalogue, differences
from tests.support.cli import run_outbox
from tests.support.psql import find_psql
from tests.support.publishing import add_endpoint, committed
from tests.support.releases import Release, releases

ROOT_SCHEMA = Path(__file__).resolve().parents[2] / "schema.sql"


TABLES = ["attempts", "deliveries", "dispatchers", "endpoint_backlog", "endpoint_slots",
          "endpoint_state", "endpoints", "events", "grantees", "inbox", "maintainer",
          "schema_version"]


def _tables(dsn: str) -> list[str]:
    return [r[0] for r in committed(
        dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'outbox' ORDER BY 1")]


def test_root_schema_is_the_packaged_schema() -> None:
    """schema.sql at the root is outbox/sql/schema.sql (the one edited) byte for byte."""
    packaged = resources.files("outbox.sql").joinpath("schema.sql").read_bytes()
    assert ROOT_SCHEMA.read_bytes() == packaged, (
        "the root schema.sql is written from outbox/sql/schema.sql: run ./dev docs")


def test_migrate_twice_on_a_new_database(empty_dsn: str) -> None:
    """migrate creates the schema once, and a second run changes nothing."""
    with psycopg.connect(empty_dsn) as conn:
        assert migrate(conn) == (0, SCHEMA_VERSION)
        assert migrate(conn) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert _tables(empty_dsn) == TABLES


def test_migrate_again_keeps_the_data(conn: psycopg.Connection[Any], dsn: str) -> None:
    """migrate on a database with endpoints, events and deliveries leaves them as they are."""
    add_endpoint(conn, "all")
    event_id = outbox.publish(conn, "mail.received", {"n": 1}, idempotency_key="k")
    conn.commit()
    query = ("SELECT e.id, e.seq, e.payload::text, d.state, p.name FROM outbox.events e "
             "JOIN outbox.deliveries d ON d.event_id = e.id "
             "JOIN outbox.endpoints p ON p.id = d.endpoint_id")
    before = committed(dsn, query)
    assert migrate(conn) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert committed(dsn, query) == before
    again = outbox.publish(conn, "mail.received", {"n": 2}, idempotency_key="k")
    conn.commit()
    assert again == event_id  # the idempotency index survived too


def test_schema_file_applied_twice_statement_by_statement(empty_dsn: str) -> None:
    """schema.sql run twice as plain SQL in autocommit (as psql would) works."""
    text = ROOT_SCHEMA.read_text("utf-8")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        for _ in range(2):
            conn.execute(text.encode())  # no parameters: the simple query protocol
    assert _tables(empty_dsn) == TABLES
    assert committed(empty_dsn, "SELECT version FROM outbox.schema_version") == [(SCHEMA_VERSION,)]


def test_schema_file_applied_twice_with_psql(cluster: Cluster, empty_dsn: str) -> None:
    """`psql -f schema.sql` twice succeeds, and migrate then finds its version in place."""
    psql = find_psql(cluster)
    if psql is None:
        pytest.skip("no psql that runs here")
    for _ in range(2):
        result = subprocess.run(
            [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", str(ROOT_SCHEMA)],
            capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
    with psycopg.connect(empty_dsn) as conn:
        assert migrate(conn) == (SCHEMA_VERSION, SCHEMA_VERSION)


def test_migrate_upgrades_a_version_1_database(empty_dsn: str) -> None:
    """A database made by the version 1 schema, with data, is upgraded in place by migrate."""
    with psycopg.connect(empty_dsn) as conn:
        conn.execute(releases()[0].schema_sql().encode())
        conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) "
                     "VALUES ('old', 'http://127.0.0.1/', 3)")
        conn.commit()
        assert migrate(conn) == (1, SCHEMA_VERSION)
        slots = conn.execute("SELECT count(*) FROM outbox.endpoint_slots").fetchone()
        state = conn.execute("SELECT circuit, failures FROM outbox.endpoint_state").fetchall()
        breaker = conn.execute(
            "SELECT breaker_failures, breaker_cooldown_seconds, breaker_window_seconds, "
            "breaker_rate FROM outbox.endpoints").fetchone()
    assert slots == (3,)
    assert state == [("closed", 0)]
    assert breaker == (10, 30.0, 30.0, 50.0)  # the defaults, for endpoints made before
    assert _tables(empty_dsn) == TABLES


def test_schema_file_records_the_last_steps_version() -> None:
    """schema.sql records, and checks for, the version of the last numbered step."""
    text = ROOT_SCHEMA.read_text("utf-8")
    assert f"VALUES ({SCHEMA_VERSION}) ON CONFLICT DO NOTHING;" in text
    assert f"FROM outbox.schema_version) < {SCHEMA_VERSION} THEN" in text
    assert steps()[-1].version == SCHEMA_VERSION


def _statements(text: str) -> str:
    """``text`` without its lines of comment alone."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("--")).strip()


def test_schema_file_and_each_script_step_pin_the_search_path_and_set_it_back() -> None:
    """schema.sql starts by pinning the session's search_path and ends by setting back the one
    it found, and so does each step of the `migrate --sql` script, with the same statements."""
    pin, unpin = (_statements(queries[name])
                  for name in ("script_pin_search_path", "script_unpin_search_path"))
    schema = _statements(ROOT_SCHEMA.read_text("utf-8"))
    assert schema.startswith(pin)
    assert schema.endswith(unpin)
    text = script(1)
    wanted = len([step for step in steps() if step.version > 1])
    assert text.count(pin) == text.count(unpin) == wanted
    assert all(part.index(pin) < part.index(unpin) for part in text.split("\n-- 0")[1:])


def test_schema_file_refuses_an_older_database(empty_dsn: str) -> None:
    """schema.sql applied by hand to a database of an earlier version fails and changes nothing."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(releases()[-1].schema_sql().encode())
        tables = _tables(empty_dsn)
        with pytest.raises(psycopg.errors.RaiseException, match="outbox migrate"):
            conn.execute(ROOT_SCHEMA.read_text("utf-8").encode())
    assert committed(empty_dsn, "SELECT max(version) FROM outbox.schema_version") == [
        (releases()[-1].version,)]
    assert _tables(empty_dsn) == tables


def test_endpoint_column_defaults_match_the_option_defaults(conn: psycopg.Connection[Any]) -> None:
    """An endpoint inserted with SQL alone behaves like `endpoints add` with no options."""
    from outbox.endpoints import EndpointSpec

    conn.execute("INSERT INTO outbox.endpoints (name, url) VALUES ('d', 'http://127.0.0.1/')")
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM outbox.endpoints").fetchone()
    assert row is not None
    # Every column of the options table (events_like too, derived from events).
    defaults = EndpointSpec(name="d", url="http://127.0.0.1/").columns()
    assert {column: row[column] for column in defaults} == defaults


def _psql_script(cluster: Cluster, script: str, dsn: str) -> None:
    psql = find_psql(cluster)
    if psql is None:
        pytest.skip("no psql that runs here")
    applied = subprocess.run([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn],
                             input=script, capture_output=True, text=True, timeout=120,
                             check=False)
    assert applied.returncode == 0, applied.stderr


def _current_as_fresh(target: str, fresh: str) -> None:
    assert differences(catalogue(target), catalogue(fresh)) == []
    again = run_outbox(target, "migrate", "--sql")
    assert (again.returncode, again.stdout) == (0, "")  # current: no statement
    assert run_outbox(target, "migrate", "--check").returncode == 0


@pytest.mark.parametrize("release", releases(), ids=str)
def test_migrate_sql_run_by_psql_upgrades_every_release_as_migrate_does(
        cluster: Cluster, release: Release, empty_dsn: str, dsn: str) -> None:
    """`outbox migrate --sql`, reading the database's version, run by `psql -v
    ON_ERROR_STOP=1`, brings a database of every earlier release to the whole catalogue
    of a fresh one, one transaction per step (a no-transaction step's statements one by one);
    then its script is empty."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(release.schema_sql().encode())
    sql = run_outbox(empty_dsn, "migrate", "--sql")
    assert sql.returncode == 0, sql.stderr
    wanted = [s for s in steps() if s.version > release.version and s.transactional]
    assert sql.stdout.count("BEGIN;") == sql.stdout.count("COMMIT;") == len(wanted)
    _psql_script(cluster, sql.stdout, empty_dsn)
    _current_as_fresh(empty_dsn, dsn)


def test_migrate_sql_from_0_needs_no_database_and_makes_the_outbox(
        cluster: Cluster, empty_dsn: str, dsn: str) -> None:
    """`migrate --sql --from 0` with no database to reach prints schema.sql in one
    transaction; run by psql it makes the outbox as migrate does. An unknown --from is
    a usage error."""
    sql = run_outbox("postgresql://nobody@127.0.0.1:9/none?connect_timeout=1",
                     "migrate", "--sql", "--from", "0")
    assert sql.returncode == 0, sql.stderr
    _psql_script(cluster, sql.stdout, empty_dsn)
    _current_as_fresh(empty_dsn, dsn)
    unknown = run_outbox(None, "migrate", "--sql", "--from", str(SCHEMA_VERSION + 1))
    assert unknown.returncode == 2
    assert "unknown schema version" in unknown.stderr
