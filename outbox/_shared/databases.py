"""The databases file: many databases, each with its own ``outbox`` schema, named in TOML.

Pure: this module reads text and an environment and returns a frozen
:class:`DatabasesFile`, or raises :class:`BadDatabasesFile` with one line
saying why. It opens no connection; the ``[catalog]`` query is run by
:mod:`outbox._shared.database_catalog`, whose rows are data, each admitted
or set aside alone by :mod:`outbox._shared.catalog_rows` (a file's entry is
configuration: a bad one refuses the whole file). Both the ``outbox``
command and the dispatcher read the file through here, so they refuse the
same files in the same words.

No message ever holds a DSN: entries are named by their ``name`` (or their
place in the file), and a DSN that libpq cannot parse is reported by
:func:`outbox._shared.dsn.check_dsn`, which masks passwords.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from outbox._shared.dsn import InvalidDsn, check_dsn, resolve_dsn
from outbox.durations import parse_duration

DEFAULT_REFRESH = 60.0
"""Seconds between two reads of the file and the catalog, unless ``refresh`` says."""
_NAME = re.compile(r"[a-z0-9_-]{1,63}")
_ENV_PREFIX = "env:"
_NOT_IN_HOST = re.compile(r"[\s,=]")  # a list in one string, or a key=value, is not a host
_TOP_KEYS = frozenset({"refresh", "database", "catalog"})
_DATABASE_KEYS = frozenset({"name", "dsn", "listen_dsn"})
_CATALOG_KEYS = frozenset({"dsn", "query", "hosts"})


class BadDatabasesFile(ValueError):
    """The file (or its catalog) cannot be used; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class Database:
    """One database: its name (for messages, metrics and ``--db``) and how to reach it."""

    name: str
    dsn: str = field(repr=False)
    listen_dsn: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Catalog:
    """Where more databases are listed: a database, and a SELECT of ``name, dsn``; with
    ``hosts``, the only hosts a row's DSN may name (see :mod:`.catalog_rows`)."""

    dsn: str = field(repr=False)
    query: str
    hosts: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class DatabasesFile:
    """What a databases file says: how often to read it again, its entries, its catalog."""

    refresh: float
    databases: tuple[Database, ...]
    catalog: Catalog | None


def load(path: str | Path, environ: Mapping[str, str] | None = None) -> DatabasesFile:
    """Read and :func:`parse` the file at ``path``; one that cannot be read is bad too."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise BadDatabasesFile(f"databases file {path}: cannot read it: "
                               f"{exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BadDatabasesFile(f"databases file {path}: it is not valid UTF-8") from None
    try:
        return parse(text, environ)
    except BadDatabasesFile as exc:
        raise BadDatabasesFile(f"databases file {path}: {exc}") from None


def parse(text: str, environ: Mapping[str, str] | None = None) -> DatabasesFile:
    """The file's text as a :class:`DatabasesFile`; ``env:NAME`` values read from ``environ``.

    A file with no ``[[database]]`` and no ``[catalog]`` lists nothing and is
    refused; with a catalog, the entries may all come from it.
    """
    env = os.environ if environ is None else environ
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadDatabasesFile(f"not valid TOML: {exc}") from None
    _known_keys(data, _TOP_KEYS, "")
    refresh = _refresh(data.get("refresh", None))
    entries = data.get("database", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadDatabasesFile("database: give each one as a [[database]] table")
    databases = [_database(entry, index, env) for index, entry in enumerate(entries, 1)]
    catalog = _catalog(data["catalog"], env) if "catalog" in data else None
    if not databases and catalog is None:
        raise BadDatabasesFile("it lists no database: add a [[database]] entry or a [catalog]")
    return DatabasesFile(refresh=refresh, databases=merge(databases, (), allow_empty=True),
                         catalog=catalog)


def merge(listed: Sequence[Database], catalogued: Iterable[Database], *,
          allow_empty: bool = False) -> tuple[Database, ...]:
    """The file's entries then the catalog's, refused when a name comes twice or none is left."""
    seen: set[str] = set()
    merged: list[Database] = []
    for where, group in (("the file", listed), ("the catalog", catalogued)):
        for database in group:
            if database.name in seen:
                raise BadDatabasesFile(f"the database name {database.name!r} is given twice "
                                       f"(again in {where}): names must be unique")
            seen.add(database.name)
            merged.append(database)
    if not merged and not allow_empty:
        raise BadDatabasesFile("it lists no database: neither the file nor the catalog "
                               "names one")
    return tuple(merged)


def is_name(value: Any) -> TypeGuard[str]:
    """Whether ``value`` is a good database name: 1-63 characters of a-z, 0-9, _ and -."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def database_from(name: Any, dsn: Any, listen_dsn: Any, environ: Mapping[str, str],
                  where: str) -> Database:
    """One entry checked: a good name, DSNs (or ``env:NAME``) that libpq can parse."""
    if not is_name(name):
        raise BadDatabasesFile(f"{where}: name must be 1 to 63 characters of a-z, 0-9, _ "
                               f"and -, not {_shown(name)}")
    where = f"database {name!r}"
    if dsn is None:
        raise BadDatabasesFile(f"{where}: dsn is missing")
    return Database(name=name, dsn=_dsn(dsn, environ, f"{where}: dsn"),
                    listen_dsn=None if listen_dsn is None
                    else _dsn(listen_dsn, environ, f"{where}: listen_dsn"))


def choose(databases: Sequence[Database], wanted: str | None) -> Database:
    """The database ``--db`` names, or the only one; otherwise why not, naming the choices."""
    by_name = {d.name: d for d in databases}
    if wanted is not None:
        if wanted in by_name:
            return by_name[wanted]
        raise BadDatabasesFile(f"no database is named {_shown(wanted)}: "
                               f"choose one of {names_of(databases)}")
    if len(databases) == 1:
        return databases[0]
    raise BadDatabasesFile(f"this command works on one database and {len(databases)} are "
                           f"listed: choose one with --db NAME ({names_of(databases)})")


def names_of(databases: Sequence[Database], most: int = 20) -> str:
    """The names, comma-separated; past ``most``, how many more there are."""
    names = [d.name for d in databases[:most]]
    more = len(databases) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _known_keys(table: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    for key in table:
        if key not in known:
            place = f"{where}: " if where else ""
            raise BadDatabasesFile(f"{place}unknown key {_shown(key)} (known: "
                                   f"{', '.join(sorted(known))})")


def _refresh(value: Any) -> float:
    if value is None:
        return DEFAULT_REFRESH
    if not isinstance(value, str):
        raise BadDatabasesFile('refresh must be a duration in quotes, such as "60s"')
    try:
        seconds = parse_duration(value).total_seconds()
    except ValueError:
        seconds = 0.0
    if not 1 <= seconds <= 86400:
        raise BadDatabasesFile(f"refresh must be a duration from 1s to 1d, such as \"60s\", "
                               f"not {_shown(value)}")
    return seconds


def _database(entry: Mapping[str, Any], index: int, environ: Mapping[str, str]) -> Database:
    where = f"database {_shown(entry['name'])}" if isinstance(entry.get("name"), str) \
        else f"database entry {index}"
    _known_keys(entry, _DATABASE_KEYS, where)
    return database_from(entry.get("name"), entry.get("dsn"), entry.get("listen_dsn"),
                         environ, where)


def _catalog(table: Any, environ: Mapping[str, str]) -> Catalog:
    if not isinstance(table, dict):
        raise BadDatabasesFile("catalog: give it as a [catalog] table")
    _known_keys(table, _CATALOG_KEYS, "catalog")
    if "dsn" not in table:
        raise BadDatabasesFile("catalog: dsn is missing")
    query = table.get("query")
    if not isinstance(query, str) or not query.strip():
        raise BadDatabasesFile("catalog: query is missing: give a SELECT returning name, dsn "
                               "and optionally listen_dsn")
    return Catalog(dsn=_dsn(table["dsn"], environ, "catalog: dsn"), query=query,
                   hosts=_hosts(table["hosts"]) if "hosts" in table else None)


def _hosts(value: Any) -> tuple[str, ...]:
    """``hosts = ["db-1.internal", ...]``: names or addresses, without ports."""
    if not isinstance(value, list) or not value or not all(
            isinstance(h, str) and h.strip() and not _NOT_IN_HOST.search(h.strip())
            for h in value):
        raise BadDatabasesFile("catalog: hosts must be a list of host names or addresses, "
                               'such as ["db-1.internal", "10.0.0.5"] (leave it out to allow '
                               "any host)")
    return tuple(h.strip() for h in value)


def _dsn(value: Any, environ: Mapping[str, str], where: str) -> str:
    """A DSN, or ``env:NAME`` read from ``environ``; checked as ``--dsn`` is, never shown."""
    if not isinstance(value, str):
        raise BadDatabasesFile(f"{where} must be a string: a DSN or env:NAME")
    if value.startswith(_ENV_PREFIX):
        variable = value[len(_ENV_PREFIX):]
        if not variable:
            raise BadDatabasesFile(f"{where}: env: needs the name of a variable")
        value = environ.get(variable, "")
        if not value:
            raise BadDatabasesFile(f"{where}: the environment variable {variable} is not set")
    elif not value.strip():
        raise BadDatabasesFile(f"{where} is empty: give a DSN or env:NAME")
    dsn = resolve_dsn(value, {})
    try:
        check_dsn(dsn)
    except InvalidDsn as exc:
        raise BadDatabasesFile(f"{where}: {exc}") from None
    return dsn


def _shown(value: Any) -> str:
    """A value from the file, short and quoted, for a message (never a DSN: see callers)."""
    text = repr(value)
    return text if len(text) <= 70 else text[:67] + "..."
