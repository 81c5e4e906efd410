"""The databases file: what it accepts, and every file it refuses, in one line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from outbox._shared import database_catalog
from outbox._shared.databases import (
    DEFAULT_REFRESH,
    BadDatabasesFile,
    Database,
    choose,
    load,
    merge,
    parse,
)

SECRET = "s3cr3t-pass"
ENV = {"A_DSN": f"postgresql://u:{SECRET}@127.0.0.1:5432/a", "EMPTY": ""}


def test_a_good_file_gives_its_entries_in_order() -> None:
    """Entries keep their order; env:NAME is read; refresh defaults to 60 s."""
    config = parse('[[database]]\nname = "tenant-a"\ndsn = "env:A_DSN"\n'
                   'listen_dsn = "host=127.0.0.1 dbname=a"\n'
                   '[[database]]\nname = "b_2"\ndsn = "postgres://127.0.0.1/b"\n', ENV)
    assert config.refresh == DEFAULT_REFRESH
    assert [d.name for d in config.databases] == ["tenant-a", "b_2"]
    assert config.databases[0].dsn == ENV["A_DSN"]
    assert config.databases[0].listen_dsn == "host=127.0.0.1 dbname=a"
    assert config.databases[1].dsn == "postgresql://127.0.0.1/b"
    assert config.catalog is None


def test_refresh_and_catalog_are_read() -> None:
    """refresh takes a duration; [catalog] needs a dsn and a query (hosts optional), alone too."""
    config = parse('refresh = "2m"\n[catalog]\ndsn = "env:A_DSN"\nquery = "SELECT name, dsn '
                   'FROM t"\n', ENV)
    assert config.refresh == 120
    assert config.databases == ()
    assert config.catalog is not None
    assert config.catalog.query.startswith("SELECT")
    assert config.catalog.hosts is None
    listed = parse('[catalog]\ndsn = "host=x"\nquery = "SELECT name, dsn FROM t"\n'
                   'hosts = ["db-1.internal", " 10.0.0.5 "]\n', ENV).catalog
    assert listed is not None
    assert listed.hosts == ("db-1.internal", "10.0.0.5")


def test_the_objects_never_show_a_dsn() -> None:
    """repr of an entry or a whole file names no DSN, so a log line cannot leak one."""
    config = parse('[[database]]\nname = "a"\ndsn = "env:A_DSN"\n'
                   '[catalog]\ndsn = "env:A_DSN"\nquery = "SELECT name, dsn FROM t"\n', ENV)
    assert SECRET not in repr(config)


@pytest.mark.parametrize(("text", "says"), [
    ('[[database]]\nname = "a"\ndsn = "host=y"\n[[database]]\nname = "a"\ndsn = "host=z"\n',
     "'a' is given twice"),
    ("", "lists no database"),
    ('refresh = "10s"\n', "lists no database"),
    ('[[database]]\nname = "a"\ndsn = "host=x"\nport = 5\n', "unknown key 'port'"),
    ('refreshh = "1s"\n[[database]]\nname = "a"\ndsn = "host=x"\n', "unknown key 'refreshh'"),
    ('[catalog]\ndsn = "host=x"\nquery = "SELECT 1"\nuser = "x"\n', "catalog: unknown key"),
    ('[[database]]\nname = "a"\ndsn = "env:NOT_SET_ANYWHERE"\n',
     "the environment variable NOT_SET_ANYWHERE is not set"),
    ('[[database]]\nname = "a"\ndsn = "env:EMPTY"\n', "EMPTY is not set"),
    ('[[database]]\nname = "a"\ndsn = "host=x"\nlisten_dsn = "env:NOPE"\n',
     "'a': listen_dsn: the environment variable NOPE is not set"),
    ('[[database]]\nname = "Tenant"\ndsn = "host=x"\n', "name must be 1 to 63"),
    ('[[database]]\nname = ""\ndsn = "host=x"\n', "name must be 1 to 63"),
    (f'[[database]]\nname = "{"a" * 64}"\ndsn = "host=x"\n', "name must be 1 to 63"),
    ('[[database]]\ndsn = "host=x"\n', "name must be 1 to 63"),
    ('[[database]]\nname = "a"\n', "dsn is missing"),
    ('[[database]]\nname = "a"\ndsn = 5\n', "must be a string"),
    ('[[database]]\nname = "a"\ndsn = "mysql://x/y"\n', "is not PostgreSQL's"),
    ('[[database]]\nname = "a"\ndsn = "host=x port=abc"\n', "port"),
    ('refresh = "soon"\n[[database]]\nname = "a"\ndsn = "host=x"\n', "refresh must be"),
    ('refresh = 60\n[[database]]\nname = "a"\ndsn = "host=x"\n', "refresh must be"),
    ('refresh = "0s"\n[[database]]\nname = "a"\ndsn = "host=x"\n', "refresh must be"),
    ("[[database]\n", "not valid TOML"),
    ('database = "a"\n', "[[database]] table"),
    ('[catalog]\nquery = "SELECT name, dsn FROM t"\n', "catalog: dsn is missing"),
    ('[catalog]\ndsn = "host=x"\n', "catalog: query is missing"),
    ('[catalog]\ndsn = "host=x"\nquery = "SELECT 1"\nhosts = "db-1"\n', "hosts must be a list"),
    ('[catalog]\ndsn = "host=x"\nquery = "SELECT 1"\nhosts = []\n', "hosts must be a list"),
    ('[catalog]\ndsn = "host=x"\nquery = "SELECT 1"\nhosts = ["a,b"]\n', "hosts must be a list"),
    ('[catalog]\ndsn = "host=x"\nquery = "SELECT 1"\nhosts = [" "]\n', "hosts must be a list"),
])
def test_bad_files_are_refused_in_one_line(text: str, says: str) -> None:
    """Every bad file is refused with one line saying why, and never a DSN or password."""
    with pytest.raises(BadDatabasesFile) as caught:
        parse(text, ENV)
    message = str(caught.value)
    assert says in message
    assert "\n" not in message
    assert SECRET not in message
    assert "host=x" not in message


def test_a_password_in_a_bad_dsn_is_not_repeated() -> None:
    """libpq's complaint about a DSN is masked before it is shown."""
    with pytest.raises(BadDatabasesFile) as caught:
        parse(f'[[database]]\nname = "a"\ndsn = "postgresql://u:{SECRET}%zz@h/db"\n', ENV)
    assert SECRET not in str(caught.value)


def test_a_file_that_cannot_be_read_names_itself(tmp_path: Path) -> None:
    """A missing or undecodable file is a bad file, named in the message."""
    with pytest.raises(BadDatabasesFile, match=r"nowhere\.toml: cannot read it"):
        load(tmp_path / "nowhere.toml")
    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(BadDatabasesFile, match="not valid UTF-8"):
        load(tmp_path / "bad.toml")


def test_names_are_unique_across_file_and_catalog() -> None:
    """A catalog row with a file entry's name is refused; an empty union too."""
    with pytest.raises(BadDatabasesFile, match=r"'a' is given twice \(again in the catalog"):
        merge([Database("a", "host=x")], [Database("a", "host=y")])
    with pytest.raises(BadDatabasesFile, match="lists no database"):
        merge([], [])


def test_choose_names_the_choices() -> None:
    """One database is used alone; several need --db; an unknown --db names the choices."""
    one, two = Database("a", "host=x"), Database("b", "host=y")
    assert choose([one], None) is one
    assert choose([one, two], "b") is two
    with pytest.raises(BadDatabasesFile, match=r"--db NAME \(a, b\)"):
        choose([one, two], None)
    with pytest.raises(BadDatabasesFile, match="no database is named 'c': choose one of a, b"):
        choose([one, two], "c")


def test_refresh_keeps_the_last_good_list(tmp_path: Path) -> None:
    """A file gone bad at a refresh leaves the last good list, and says why."""
    path = tmp_path / "db.toml"
    path.write_text('[[database]]\nname = "a"\ndsn = "host=x"\n')
    first = database_catalog.refresh(path, database_catalog.Refreshed((), DEFAULT_REFRESH))
    assert first.problem is None
    assert [d.name for d in first.databases] == ["a"]
    path.write_text('[[database]]\nname = "a"\ndsn = "host=x"\nbad = 1\n')
    second = database_catalog.refresh(path, first)
    assert second.databases == first.databases
    assert second.problem is not None
    assert "unknown key 'bad'" in second.problem
    path.write_text('refresh = "5s"\n[[database]]\nname = "b"\ndsn = "host=x"\n')
    third = database_catalog.refresh(path, second)
    assert third.problem is None
    assert [d.name for d in third.databases] == ["b"]
    assert third.refresh == 5


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_catalog_that_is_down_is_tried_again(tmp_path: Path) -> None:
    """At start the file's entries serve meanwhile; at a refresh the last good list stays."""
    path = tmp_path / "db.toml"
    path.write_text('[[database]]\nname = "a"\ndsn = "host=x"\n'
                    '[catalog]\ndsn = "env:CATALOG"\nquery = "SELECT name, dsn FROM t"\n')
    env = {"CATALOG": f"postgresql://u:{SECRET}@127.0.0.1:{_closed_port()}/c"}
    start = database_catalog.first(path, env)
    assert [d.name for d in start.databases] == ["a"]
    assert start.problem is not None
    assert "catalog database is unreachable" in start.problem
    assert SECRET not in start.problem
    last = database_catalog.Refreshed((Database("a", "host=x"), Database("b", "host=y")), 60)
    again = database_catalog.refresh(path, last, env)
    assert again.databases == last.databases
    assert again.problem is not None
    assert "last good list of 2 databases" in again.problem
    with pytest.raises(database_catalog.CatalogUnreachable):
        database_catalog.databases(load(path, env), env)
