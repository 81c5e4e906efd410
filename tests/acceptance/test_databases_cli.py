"""The `outbox` command over a databases file: --databases, --db, migrate --all, status --all.

Real databases in the suite's cluster, one of them on an old schema, one
with none, one refusing the role, one behind a closed port; the command runs
as a subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql

import outbox
from outbox.migrate import SCHEMA_VERSION
from tests.conftest import Cluster
from tests.support.cli import run_outbox
from tests.support.publishing import add_endpoint
from tests.support.releases import releases
from tests.support.web_server import web_server

PASSWORD = "pw-9f3c1d"  # in the unreachable databases' DSNs: it must never be printed
_SECRETS: list[str] = [PASSWORD]


def _outbox(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = run_outbox(None, *args, env=env, timeout=180)
    assert "Traceback" not in result.stderr
    for secret in _SECRETS:
        assert secret not in result.stdout + result.stderr
    return result


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Databases:
    """Databases made for one test, in the suite's cluster, dropped at its end."""

    def __init__(self, cluster: Cluster, template: str, tmp_path: Path) -> None:
        self.cluster, self.template, self.tmp_path = cluster, template, tmp_path
        self.made: list[str] = []
        self.dsns: dict[str, str] = {}

    def add(self, name: str, kind: str) -> str:
        """kind: current (migrated), empty (no schema), old (the last release's schema)."""
        real = f"dbs_{os.getpid()}_{name.replace('-', '_')}"
        with self.cluster.admin() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(real)))
            create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(real), sql.Identifier(self.template)) if kind == "current" \
                else sql.SQL("CREATE DATABASE {}").format(sql.Identifier(real))
            admin.execute(create)
        self.made.append(real)
        dsn = self.cluster.dsn_for(real)
        if kind == "old":
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(releases()[-1].schema_sql().encode())
        self.dsns[name] = dsn
        return dsn

    def unreachable(self, name: str) -> None:
        self.dsns[name] = f"postgresql://someone:{PASSWORD}@127.0.0.1:{_closed_port()}/x"

    def file(self, *names: str, extra: str = "") -> str:
        """A databases file of ``names`` (all, by default), each DSN with the password in it."""
        path = self.tmp_path / f"databases-{len(names)}-{abs(hash(names))}.toml"
        lines = [extra]
        for name in names or tuple(self.dsns):
            dsn = self.dsns[name]
            lines += ["[[database]]", f'name = "{name}"', f"dsn = {json.dumps(dsn)}"]
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    def drop(self) -> None:
        with self.cluster.admin() as admin:
            for real in self.made:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(real)))


@pytest.fixture
def dbs(cluster: Cluster, template_db: str, tmp_path: Path) -> Iterator[Databases]:
    made = Databases(cluster, template_db, tmp_path)
    password = psycopg.conninfo.conninfo_to_dict(cluster.admin_dsn).get("password")
    if password and password not in _SECRETS:  # the cluster's, in every other DSN
        _SECRETS.append(str(password))
    try:
        yield made
    finally:
        made.drop()


def _backlog(dsn: str, events: int, age_seconds: int) -> None:
    """``events`` pending deliveries to one endpoint, the oldest ``age_seconds`` old."""
    with psycopg.connect(dsn) as conn:
        add_endpoint(conn, "hook")
        for n in range(events):
            outbox.publish(conn, "order.created", {"n": n})
        conn.execute("UPDATE outbox.deliveries SET created_at = now() - make_interval("
                     "secs => %s)", (age_seconds,))


def test_status_all_lists_every_database_oldest_backlog_first(dbs: Databases) -> None:
    """status --all: one row per database, ok ones by oldest backlog, states for the rest."""
    _backlog(dbs.add("quiet", "current"), 1, 5)
    _backlog(dbs.add("busy", "current"), 3, 3600)
    dbs.add("idle", "current")
    dbs.add("bare", "empty")
    dbs.add("older", "old")
    dbs.unreachable("gone")
    refused = dbs.add("locked-out", "current")
    role = f"nobody_{os.getpid()}"
    with dbs.cluster.admin() as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), _SECRETS[-1]))
    dbs.dsns["locked-out"] = psycopg.conninfo.make_conninfo(refused, user=role)
    try:
        path = dbs.file()
        result = _outbox("status", "--all", "--json", "--databases", path)
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)["databases"]
        assert [r["database"] for r in rows][:3] == ["busy", "quiet", "idle"]
        by_name = {r["database"]: r for r in rows}
        assert set(by_name) == {"busy", "quiet", "idle", "bare", "older", "gone", "locked-out"}
        assert by_name["busy"]["pending"] == 3
        assert by_name["busy"]["dead"] == 0
        assert by_name["busy"]["oldest_pending_seconds"] >= 3600
        assert by_name["idle"] == {"database": "idle", "state": "ok", "pending": 0, "dead": 0,
                                   "oldest_pending_seconds": 0, "reason": None}
        assert {n: by_name[n]["state"] for n in ("bare", "older", "gone", "locked-out")} == {
            "bare": "no-schema", "older": "old-schema", "gone": "unreachable",
            "locked-out": "refused"}
        assert by_name["gone"]["pending"] is None
        assert by_name["gone"]["reason"]  # why it is unreachable, the password masked
        text = _outbox("status", "--all", env={"OUTBOX_DATABASES": path})
        assert text.returncode == 0, text.stderr
        lines = text.stdout.strip().splitlines()
        assert len(lines) == 1 + len(rows)  # a header, then one line per database
        assert lines[1].startswith("busy ")
        assert "unreachable" in text.stdout
    finally:
        with dbs.cluster.admin() as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_migrate_all_goes_on_past_failures_and_finishes_when_run_again(dbs: Databases) -> None:
    """migrate --all: one outcome per database, exit 1 on a failure, a rerun finishes the rest."""
    dbs.add("done", "current")
    dbs.add("bare", "empty")
    blocked = dbs.add("blocked", "old")
    dbs.add("older", "old")
    dbs.unreachable("gone")
    path = dbs.file()
    with psycopg.connect(blocked) as reader:
        reader.execute("SELECT count(*) FROM outbox.events")  # ACCESS SHARE until rollback
        first = _outbox("migrate", "--all", "--databases", path, "--lock-timeout", "0.1",
                        "--lock-attempts", "1")
        reader.rollback()
    assert first.returncode == 1
    lines = first.stdout.strip().splitlines()
    assert lines[0] == "done: current"
    assert lines[1] == "bare: migrated"
    assert lines[2].startswith("blocked: failed: ")
    assert lines[3] == "older: migrated"
    assert lines[4].startswith("gone: unreachable: ")
    assert len(lines) == 5
    assert "run `outbox migrate --all` again" in first.stderr

    again = _outbox("migrate", "--all", "--json", "--databases", path)
    assert again.returncode == 1  # the unreachable one still is
    outcomes = {o["database"]: o for o in json.loads(again.stdout)}
    assert outcomes["blocked"]["outcome"] == "migrated"
    assert outcomes["blocked"]["to_version"] == SCHEMA_VERSION
    assert outcomes["done"] == {"database": "done", "outcome": "current",
                                "from_version": SCHEMA_VERSION, "to_version": SCHEMA_VERSION,
                                "error": None}
    assert outcomes["gone"]["outcome"] == "unreachable"
    assert outcomes["gone"]["error"]
    assert outcomes["gone"]["from_version"] is None

    reachable = dbs.file("done", "bare", "blocked", "older")
    last = _outbox("migrate", "--all", "--databases", reachable)
    assert last.returncode == 0, last.stderr
    assert last.stdout.splitlines() == ["done: current", "bare: current", "blocked: current",
                                        "older: current"]


def test_one_database_is_picked_with_db(dbs: Databases) -> None:
    """--db (or OUTBOX_DB) picks a database; a lone one needs none; OUTBOX_DSN is then ignored."""
    _backlog(dbs.add("a", "current"), 2, 1)
    dbs.add("b", "current")
    both, alone = dbs.file("a", "b"), dbs.file("a")
    stray = {"OUTBOX_DSN": "postgresql://127.0.0.1:1/nothing", "DATABASE_URL": "host=nowhere"}
    picked = _outbox("status", "--json", "--databases", both, "--db", "a", env=stray)
    assert picked.returncode == 0, picked.stderr
    assert json.loads(picked.stdout)["endpoints"][0]["pending"] == 2
    by_env = _outbox("status", "--json", env={**stray, "OUTBOX_DATABASES": both,
                                              "OUTBOX_DB": "b"})
    assert by_env.returncode == 0, by_env.stderr
    assert json.loads(by_env.stdout)["endpoints"] == []
    lone = _outbox("--databases", alone, "dead", "list", env=stray)
    assert lone.returncode == 0, lone.stderr


@pytest.mark.parametrize(("args", "says"), [
    (("status", "--dsn", "host=127.0.0.1", "--databases", "FILE"), "--dsn and --databases"),
    (("status", "--databases", "FILE"), "choose one with --db NAME (a, b)"),
    (("status", "--databases", "FILE", "--db", "c"), "no database is named 'c': choose one "
     "of a, b"),
    (("migrate", "--databases", "FILE"), "choose one with --db NAME"),
    (("status", "--db", "a"), "--db picks one database of a databases file"),
    (("status", "--all"), "--all needs a databases file"),
    (("migrate", "--all", "--databases", "FILE", "--check"), "--check is for one database"),
    (("migrate", "--json", "--databases", "FILE", "--db", "a"), "--json goes with --all"),
    (("status", "--databases", "BAD"), "unknown key 'user'"),
    (("status", "--databases", "MISSING"), "cannot read it"),
])
def test_bad_usage_exits_two_in_one_line(dbs: Databases, tmp_path: Path,
                                         args: tuple[str, ...], says: str) -> None:
    """--dsn with --databases, a missing or unknown --db, a bad file: exit 2, one line."""
    dbs.unreachable("a")
    dbs.unreachable("b")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[database]]\nname = "a"\ndsn = "host=x"\nuser = "u"\n')
    names = {"FILE": dbs.file(), "BAD": str(bad), "MISSING": str(tmp_path / "missing.toml")}
    result = _outbox(*(names.get(a, a) for a in args))
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_catalog_lists_more_databases(dbs: Databases, tmp_path: Path) -> None:
    """A [catalog] query adds databases; a bad query is exit 2; a catalog that is down, 1;
    a row naming a database of the file is set aside, the file's entry served."""
    dsn_c = dbs.add("catalogued", "current")
    home = dbs.add("home", "current")
    with psycopg.connect(home) as conn:
        conn.execute("CREATE TABLE public.tenants (name text, dsn text, active bool)")
        conn.execute("INSERT INTO public.tenants VALUES ('catalogued', %s, true), "
                     "('off', 'host=x', false)", (dsn_c,))
    env = {"CATALOG_DSN": home}
    path = dbs.file("home", extra=(
        '[catalog]\ndsn = "env:CATALOG_DSN"\n'
        'query = "SELECT name, dsn FROM public.tenants WHERE active"\n'))
    listed = _outbox("status", "--all", "--json", "--databases", path, env=env)
    assert listed.returncode == 0, listed.stderr
    assert sorted(r["database"] for r in json.loads(listed.stdout)["databases"]) == [
        "catalogued", "home"]
    unparsed = tmp_path / "unparsed.toml"
    unparsed.write_text('[catalog]\ndsn = "env:CATALOG_DSN"\nquery = "SELEC name, dsn"\n')
    bad = _outbox("status", "--all", "--databases", str(unparsed), env=env)
    assert bad.returncode == 2, bad.stderr
    assert "the query does not parse" in bad.stderr
    unqualified = tmp_path / "unqualified.toml"
    unqualified.write_text('[catalog]\ndsn = "env:CATALOG_DSN"\n'
                           'query = "SELECT name, dsn FROM tenants WHERE active"\n')
    bare = _outbox("status", "--all", "--json", "--databases", str(unqualified), env=env)
    assert bare.returncode == 0, bare.stderr
    assert [r["database"] for r in json.loads(bare.stdout)["databases"]] == ["catalogued"]
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text('[catalog]\ndsn = "env:CATALOG_DSN"\n'
                         'query = "SELECT name, dsn FROM no_such_table"\n')
    missing = _outbox("status", "--all", "--databases", str(elsewhere), env=env)
    assert missing.returncode == 2, missing.stderr
    assert "name a table in another schema with its schema" in missing.stderr
    twice = tmp_path / "twice.toml"
    twice.write_text(f'[[database]]\nname = "catalogued"\ndsn = {json.dumps(home)}\n' + (
        '[catalog]\ndsn = "env:CATALOG_DSN"\n'
        'query = "SELECT name, dsn FROM public.tenants WHERE active"\n'))
    dup = _outbox("migrate", "--all", "--databases", str(twice), env=env)
    assert dup.returncode == 0, dup.stderr  # the file's entry wins; the row is set aside
    assert dup.stdout.splitlines() == ["catalogued: current"]
    assert "catalog row catalogued #1 is set aside, not served: its name is a database of " \
        "the file" in dup.stderr
    down = _outbox("status", "--all", "--databases", path, env={
        "CATALOG_DSN": f"postgresql://u:{PASSWORD}@127.0.0.1:{_closed_port()}/x"})
    assert down.returncode == 1
    assert "catalog database is unreachable" in down.stderr




def test_web_serves_the_overview_of_the_file(dbs: Databases) -> None:
    """outbox web --databases: / redirects to /databases; ?db= serves one database's pages."""
    _backlog(dbs.add("a", "current"), 2, 60)
    dbs.add("b", "current")
    dbs.unreachable("gone")
    said: list[str] = []
    with web_server("postgresql://127.0.0.1:1/ignored", "--databases", dbs.file(),
                    said=said) as url, \
            httpx.Client(base_url=url, trust_env=False) as client:
        root = client.get("/")
        assert root.status_code == 303
        assert root.headers["location"] == "/databases"
        rows = client.get("/databases?format=json").json()["databases"]
        assert [(r["database"], r["state"]) for r in rows] == [
            ("a", "ok"), ("b", "ok"), ("gone", "unreachable")]
        assert client.get("/?db=a&format=json").json()["endpoints"][0]["pending"] == 2
        assert client.get("/dead?db=zz").status_code == 404
        html = client.get("/databases").text
        for secret in _SECRETS:
            assert secret not in html
    for secret in _SECRETS:
        assert secret not in "\n".join(said)


def test_web_with_db_serves_that_database_alone(dbs: Databases) -> None:
    """outbox web --databases FILE --db NAME serves that one database, as with --dsn."""
    _backlog(dbs.add("a", "current"), 1, 1)
    dbs.add("b", "current")
    with web_server("postgresql://127.0.0.1:1/ignored", "--databases", dbs.file(), "--db",
                    "a") as url, httpx.Client(base_url=url, trust_env=False) as client:
        assert client.get("/?format=json").json()["endpoints"][0]["pending"] == 1
        assert client.get("/databases").status_code == 404
    refused = _outbox("web", "--databases", dbs.file(), "--db", "c")
    assert refused.returncode == 2
    assert "choose one of a, b" in refused.stderr
