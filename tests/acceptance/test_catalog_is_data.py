"""The catalog is data: its table's owner runs no code as the reader, and a row can list a
database and nothing more (not the fleet's environment, not a host off the list, not the
other rows' fate).

The catalog table is owned by an application role of its own and read by a role that may
read only it, as docs/scaling.md tells; the commands and the dispatcher run as
subprocesses, as users run them, against databases of the suite's cluster.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.conftest import Cluster
from tests.support.cli import clean_environment, run_outbox
from tests.support.dispatcher import Dispatcher, wait_until
from tests.support.roles import create_role, drop_database_and_roles, role_dsn, role_password
from tests.support.web_server import web_server

LEAKED = "whsec_" + secrets.token_urlsafe(32)
"""The value of OUTBOX_SECRET_LEAK in the fleet's environment: it must never be printed."""
QUERY = "SELECT name, dsn FROM public.tenants ORDER BY position"
_counter = itertools.count()


class Catalog:
    """A catalog database whose ``public.tenants`` the application role owns, read by a role
    granted SELECT on it alone; and the served databases its rows and the file name."""

    def __init__(self, cluster: Cluster, template: str, tmp_path: Path) -> None:
        suffix = f"{os.getpid()}_{next(_counter)}"
        self.cluster, self.template, self.tmp_path = cluster, template, tmp_path
        self.app, self.reader = f"catapp_{suffix}", f"catreader_{suffix}"
        self.home = f"cathome_{suffix}"
        self.made: list[str] = [self.home]
        self.dsns: dict[str, str] = {}
        with cluster.admin() as admin:
            for role in (self.app, self.reader):
                create_role(admin, role)
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.home)))
        with psycopg.connect(cluster.dsn_for(self.home), autocommit=True) as owner:
            owner.execute("CREATE TABLE public.tenants (position serial, name text, dsn text)")
            for grant in ("ALTER TABLE public.tenants OWNER TO {}",
                          "GRANT CREATE ON SCHEMA public TO {}"):  # the application's database
                owner.execute(sql.SQL(grant).format(sql.Identifier(self.app)))
            owner.execute(sql.SQL("GRANT SELECT ON public.tenants TO {}").format(
                sql.Identifier(self.reader)))
        self.env = {"CATALOG_DSN": self.dsn(self.reader), "OUTBOX_SECRET_LEAK": LEAKED}

    def dsn(self, role: str) -> str:
        """The catalog database, as ``role``."""
        return role_dsn(self.cluster.dsn_for(self.home), role)

    def database(self, name: str) -> str:
        """A new migrated database, its DSN (the cluster's superuser)."""
        real = f"{self.home}_{name.replace('-', '_')}"
        with self.cluster.admin() as admin:
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(real), sql.Identifier(self.template)))
        self.made.append(real)
        self.dsns[name] = self.cluster.dsn_for(real)
        return self.dsns[name]

    def as_app(self, *statements: str, rows: list[tuple[Any, Any]] | None = None) -> None:
        """As the table's owner, the application: ``statements``, then ``rows`` appended."""
        with psycopg.connect(self.dsn(self.app), autocommit=True) as app:
            for statement in statements:
                app.execute(statement.encode())
            for name, dsn in rows or []:
                app.execute("INSERT INTO public.tenants (name, dsn) VALUES (%s, %s)",
                            (name, dsn))

    def file(self, *, entries: tuple[str, ...] = (), query: str = QUERY,
             hosts: list[str] | None = None, refresh: str = "60s") -> str:
        """A databases file: ``entries`` (names of :meth:`database`), then the catalog."""
        lines = [f'refresh = "{refresh}"']
        for name in entries:
            lines += ["[[database]]", f'name = "{name}"', f"dsn = {json.dumps(self.dsns[name])}"]
        lines += ["[catalog]", 'dsn = "env:CATALOG_DSN"', f"query = {json.dumps(query)}"]
        if hosts is not None:
            lines.append(f"hosts = {json.dumps(hosts)}")
        path = self.tmp_path / f"databases-{next(_counter)}.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return str(path)

    def drop(self) -> None:
        for real in self.made[1:]:
            drop_database_and_roles(self.cluster, real, ())
        drop_database_and_roles(self.cluster, self.home, (self.app, self.reader))


@pytest.fixture
def catalog(cluster: Cluster, template_db: str, tmp_path: Path) -> Iterator[Catalog]:
    made = Catalog(cluster, template_db, tmp_path)
    try:
        yield made
    finally:
        made.drop()


class Dials:
    """A listening socket on 127.0.0.1 that counts the connections made to it."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port = int(self._server.getsockname()[1])
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="dials")

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.count += 1
            conn.close()

    def __enter__(self) -> Dials:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()


def _secrets(catalog: Catalog) -> list[str]:
    return [LEAKED, role_password(catalog.reader), role_password(catalog.app)]


def _outbox(catalog: Catalog, *args: str) -> subprocess.CompletedProcess[str]:
    result = run_outbox(None, *args, env=catalog.env, timeout=120)
    assert "Traceback" not in result.stderr
    for secret in _secrets(catalog):
        assert secret not in result.stdout + result.stderr
    return result


def _refused(catalog: Catalog, path: str, words: str) -> None:
    """``outbox status --all`` over ``path`` exits 2, in one line holding ``words``."""
    result = _outbox(catalog, "status", "--all", "--databases", path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _dispatcher_start(catalog: Catalog, path: str) -> subprocess.CompletedProcess[str]:
    """``outbox-dispatcher --databases PATH`` when it refuses to start (else it times out)."""
    return subprocess.run([sys.executable, "-m", "dispatcher", "--databases", path,
                           "--metrics-port", "0"], capture_output=True, text=True,
                          env=clean_environment(catalog.env), timeout=30, check=False)


def _many(catalog: Catalog, path: str) -> Dispatcher:
    """The dispatcher over ``path``, once it serves a database."""
    dispatcher = Dispatcher(None, "--databases", path, "--sweep-interval", "30",
                            env=catalog.env).start()
    try:
        dispatcher.wait_serving(timeout=60)
    except BaseException:
        dispatcher.stop()
        raise
    return dispatcher


def _up(dispatcher: Dispatcher) -> dict[str, float]:
    text = dispatcher.get("/metrics").text
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^outbox_database_up\{database="([^"]+)"\} (\S+)$', text, re.M)}


def _states(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[str, str | None]]:
    assert result.returncode == 0, result.stderr
    return {r["database"]: (r["state"], r["reason"])
            for r in json.loads(result.stdout)["databases"]}


_POLICY = ("ALTER TABLE public.tenants ENABLE ROW LEVEL SECURITY",
           "CREATE POLICY listed ON public.tenants USING (name <> 'hidden')")


def test_a_policy_or_a_view_on_the_catalog_refuses_the_read_and_the_start(
        catalog: Catalog) -> None:
    """A policy on the catalog table, or a view, refuses the read: commands and start exit 2."""
    catalog.as_app(*_POLICY, rows=[("cat-a", catalog.database("cat-a")),
                                   ("hidden", catalog.dsns["cat-a"])])
    path = catalog.file()
    _refused(catalog, path, "row security")
    started = _dispatcher_start(catalog, path)
    assert started.returncode == 2, started.stderr
    assert "row security" in started.stderr
    # Read as the table's owner, whom its policies spare: refused all the same.
    catalog.env["CATALOG_DSN"] = catalog.dsn(catalog.app)
    _refused(catalog, path, "public.tenants, a table with row security or policies")
    catalog.env["CATALOG_DSN"] = catalog.dsn(catalog.reader)
    catalog.as_app("CREATE VIEW public.tenant_view AS SELECT * FROM public.tenants",
                   f"GRANT SELECT ON public.tenant_view TO {catalog.reader}")
    _refused(catalog, catalog.file(query="SELECT name, dsn FROM public.tenant_view"),
             "public.tenant_view, a view")


def test_a_foreign_partition_of_the_catalog_table_refuses_the_read(catalog: Catalog) -> None:
    """A foreign table among the catalog table's partitions (which only planning would
    open) refuses the read: its wrapper's code would run as the reader."""
    with psycopg.connect(catalog.cluster.dsn_for(catalog.home), autocommit=True) as owner:
        try:
            owner.execute("CREATE EXTENSION postgres_fdw")
        except psycopg.errors.UndefinedFile as exc:
            pytest.skip(f"postgres_fdw is not installed: {exc}")
        owner.execute("CREATE SERVER far FOREIGN DATA WRAPPER postgres_fdw")
        owner.execute(sql.SQL("GRANT USAGE ON FOREIGN SERVER far TO {}").format(
            sql.Identifier(catalog.app)))
    catalog.as_app("CREATE TABLE public.sharded (name text, dsn text) PARTITION BY LIST (name)",
                   "CREATE TABLE public.sharded_near PARTITION OF public.sharded "
                   "FOR VALUES IN ('near')",
                   "CREATE FOREIGN TABLE public.sharded_far PARTITION OF public.sharded "
                   "FOR VALUES IN ('far') SERVER far",
                   f"GRANT SELECT ON public.sharded TO {catalog.reader}")
    _refused(catalog, catalog.file(query="SELECT name, dsn FROM public.sharded"),
             "public.sharded_far, a foreign table")


def test_a_policy_added_at_run_time_leaves_the_last_good_list(catalog: Catalog) -> None:
    """A policy added while the dispatcher runs fails the refresh: the log says so, the last
    good list stays, and the catalog is read again once the policy is gone."""
    catalog.as_app(rows=[("cat-a", catalog.database("cat-a"))])
    dispatcher = _many(catalog, catalog.file(refresh="1s"))
    try:
        wait_until(lambda: _up(dispatcher).get("cat-a") == 1.0, timeout=60,
                   dispatcher=dispatcher, what="cat-a to be served")
        catalog.as_app(*_POLICY, rows=[("cat-b", catalog.database("cat-b"))])
        wait_until(lambda: "the databases list was not read again" in dispatcher.log(),
                   timeout=30, dispatcher=dispatcher, what="the refresh to fail")
        log = dispatcher.log()
        assert "row security" in log
        assert "the last good list of 1 databases stays in force" in log
        assert _up(dispatcher) == {"cat-a": 1.0}
        catalog.as_app("DROP POLICY listed ON public.tenants",
                       "ALTER TABLE public.tenants DISABLE ROW LEVEL SECURITY")
        wait_until(lambda: _up(dispatcher).get("cat-b") == 1.0, timeout=60,
                   dispatcher=dispatcher, what="cat-b to be served once the policy is gone")
        assert _up(dispatcher)["cat-a"] == 1.0
    finally:
        dispatcher.stop()
    for secret in _secrets(catalog):
        assert secret not in dispatcher.log()


def test_a_row_naming_an_environment_variable_is_set_aside_and_never_read(
        catalog: Catalog) -> None:
    """A row with env:NAME is set aside, the others served; the variable's value is never
    printed, logged or shown by the commands, the dispatcher or the web view."""
    catalog.as_app(rows=[("leak", "env:OUTBOX_SECRET_LEAK"),
                         ("cat-a", catalog.database("cat-a"))])
    path = catalog.file()
    states = _states(_outbox(catalog, "status", "--all", "--json", "--databases", path))
    assert states["cat-a"] == ("ok", None)
    state, reason = states["leak"]
    assert state == "refused"
    assert reason is not None
    assert "env:NAME" in reason
    picked = _outbox(catalog, "status", "--databases", path, "--db", "leak")
    assert picked.returncode == 2
    assert "catalog row leak is set aside" in picked.stderr
    migrated = _outbox(catalog, "migrate", "--all", "--databases", path)
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.splitlines() == ["cat-a: current"]
    assert "catalog row leak is set aside" in migrated.stderr
    said: list[str] = []
    with web_server("postgresql://127.0.0.1:1/ignored", "--databases", path, env=catalog.env,
                    said=said) as url, httpx.Client(base_url=url, trust_env=False) as client:
        rows = client.get("/databases?format=json").json()["databases"]
        html = client.get("/databases").text
    assert [(r["database"], r["state"]) for r in rows] == [("cat-a", "ok"), ("leak", "refused")]
    assert "leak" in html
    for secret in _secrets(catalog):
        assert secret not in html + "\n".join(said)
    dispatcher = _many(catalog, path)
    try:
        wait_until(lambda: _up(dispatcher).get("cat-a") == 1.0, timeout=60,
                   dispatcher=dispatcher, what="cat-a to be served")
        assert "leak" not in _up(dispatcher)
    finally:
        dispatcher.stop()
    log = dispatcher.log()
    assert log.count("catalog row leak is set aside, not served: its dsn is env:NAME") == 1
    for secret in _secrets(catalog):
        assert secret not in log


def test_a_row_naming_a_host_outside_the_list_is_set_aside_and_never_dialled(
        catalog: Catalog) -> None:
    """With hosts, a row naming another host is set aside and never dialled; the others are
    served."""
    with Dials() as dials:
        catalog.as_app(rows=[("outside", f"host=localhost port={dials.port} dbname=x "
                                         "user=someone connect_timeout=2"),
                             ("cat-a", catalog.database("cat-a"))])
        path = catalog.file(hosts=["127.0.0.1"])
        states = _states(_outbox(catalog, "status", "--all", "--json", "--databases", path))
        assert states["cat-a"] == ("ok", None)
        assert states["outside"][0] == "refused"
        assert "a host outside the catalog's hosts list" in str(states["outside"][1])
        dispatcher = _many(catalog, path)
        try:
            wait_until(lambda: _up(dispatcher).get("cat-a") == 1.0, timeout=60,
                       dispatcher=dispatcher, what="cat-a to be served")
            assert "catalog row outside is set aside" in dispatcher.log()
            assert "outside" not in _up(dispatcher)
        finally:
            dispatcher.stop()
        assert dials.count == 0
        # Without the list the same row is dialled: the socket does see a dial.
        _outbox(catalog, "status", "--all", "--databases", catalog.file())
        assert dials.count > 0


def test_one_bad_row_sets_aside_that_row_alone(catalog: Catalog) -> None:
    """Bad names, bad DSNs and names given twice set aside their rows alone: the others are
    served, and the dispatcher, status --all and web --databases start as usual."""
    catalog.database("filed")
    catalog.as_app(rows=[("cat-a", catalog.database("cat-a")),
                         ("Bad Name", catalog.dsns["cat-a"]),
                         ("filed", catalog.dsns["cat-a"]),
                         ("cat-a", catalog.database("cat-b")),
                         ("broken", "host=127.0.0.1 port=abc")])
    path = catalog.file(entries=("filed",))
    states = _states(_outbox(catalog, "status", "--all", "--json", "--databases", path))
    assert {name: state for name, (state, _) in states.items()} == {
        "filed": "ok", "cat-a": "ok", "#2": "refused", "filed #3": "refused",
        "cat-a #4": "refused", "broken": "refused"}
    assert "an earlier row has its name" in str(states["cat-a #4"][1])
    assert "Bad Name" not in json.dumps(states)
    with web_server("postgresql://127.0.0.1:1/ignored", "--databases", path,
                    env=catalog.env) as url, httpx.Client(base_url=url, trust_env=False) as client:
        rows = client.get("/databases?format=json").json()["databases"]
        assert len(rows) == 6
        assert client.get("/?db=cat-a&format=json").status_code == 200
    dispatcher = _many(catalog, path)
    try:
        wait_until(lambda: _up(dispatcher) == {"filed": 1.0, "cat-a": 1.0}, timeout=60,
                   dispatcher=dispatcher, what="the good rows and the file's entry served")
    finally:
        dispatcher.stop()
    log = dispatcher.log()
    for label in ("#2", "filed #3", "cat-a #4", "broken"):
        assert log.count(f"catalog row {label} is set aside") == 1, log
    assert "Bad Name" not in log
