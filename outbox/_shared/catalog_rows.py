"""The catalog's rows, admitted one at a time: what a row may name, and why one is set aside.

The catalog is data, not configuration: its table is written by the
application (or whoever else may write it), so a row can list a database
to serve, and nothing more. It cannot reach into the fleet's environment or
its files, dial a server the databases file does not allow, relax the
authentication or TLS the fleet's environment asks for, or keep the other
rows from being served. Each row is checked alone (:func:`admit`); a row
that fails a check is set aside (:class:`Aside`) with its reason while the
others are served:

- its name: 1-63 characters of ``[a-z0-9_-]``, and none the file gives or an
  earlier row took;
- its ``dsn`` (and ``listen_dsn``): a connection string libpq can parse,
  given itself (``env:NAME`` reads the fleet's environment: the file's own
  entries may, a row may not);
- with the ``[catalog]`` table's ``hosts = [...]``, every host it names is
  one of them (a DSN that names none, or a service whose hosts live in a
  file, would take them from the fleet's own settings);
- no libpq keyword that reads or writes a file of the fleet's (``passfile``,
  ``servicefile``, ``sslkeylogfile``) or starts an OAuth flow, and none of
  the authentication and TLS keywords whose variable the fleet's environment
  sets (``sslmode`` while ``PGSSLMODE`` is set, ``require_auth`` while
  ``PGREQUIREAUTH`` is): what the fleet asks of every server, a row cannot undo.

Pure: no connection, no environment but the one passed in. Reasons are the
project's own words: nothing of a row's values is ever quoted (a value may
be anything its writer chose, an environment variable's once ``env:`` was
read), only the row's name, and its place in the query's answer when the name
itself is bad.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

import psycopg

from outbox._shared.databases import Database, is_name
from outbox._shared.dsn import InvalidDsn, check_dsn, resolve_dsn

_FILES = frozenset({"passfile", "servicefile", "sslkeylogfile"})
"""Keywords naming a file of the fleet's that libpq would read or write."""
_FLEET_DECIDES = {
    "sslmode": "PGSSLMODE", "require_auth": "PGREQUIREAUTH",
    "channel_binding": "PGCHANNELBINDING", "gssencmode": "PGGSSENCMODE",
    "sslnegotiation": "PGSSLNEGOTIATION", "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY", "sslcertmode": "PGSSLCERTMODE",
    "sslcrl": "PGSSLCRL", "sslcrldir": "PGSSLCRLDIR", "sslsni": "PGSSLSNI",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION", "requirepeer": "PGREQUIREPEER",
    "krbsrvname": "PGKRBSRVNAME", "gsslib": "PGGSSLIB", "gssdelegation": "PGGSSDELEGATION",
}
"""Authentication and TLS keywords, with the variable that sets each for every connection."""


@dataclass(frozen=True, slots=True)
class Aside:
    """A catalog row that is not served: its place in the query's answer, its name when
    that is good, and why."""

    row: int
    name: str | None
    reason: str
    duplicate: bool = False

    @property
    def label(self) -> str:
        """How messages and listings name it: its name; ``#N`` (its place) for a bad name,
        which is not shown; ``NAME #N`` when the name is another database's."""
        if self.name is None:
            return f"#{self.row}"
        return f"{self.name} #{self.row}" if self.duplicate else self.name

    def said(self) -> str:
        return f"catalog row {self.label} is set aside, not served: {self.reason}"


@dataclass(frozen=True, slots=True)
class Listing:
    """What the file and its catalog list: the databases to serve, the rows set aside."""

    databases: tuple[Database, ...]
    aside: tuple[Aside, ...] = ()


def admit(rows: Iterable[Mapping[str, Any]], *, taken: Iterable[str],
          hosts: Sequence[str] | None, environ: Mapping[str, str]) -> Listing:
    """The rows (``name``, ``dsn``, maybe ``listen_dsn``) as databases, each bad one set
    aside alone; ``taken``: the file's names, which a row may not take."""
    file_names, seen = set(taken), set[str]()
    allowed = None if hosts is None else {host_key(h) for h in hosts}
    served: list[Database] = []
    aside: list[Aside] = []
    for number, row in enumerate(rows, 1):
        name = row.get("name")
        if not is_name(name):
            aside.append(Aside(number, None, "its name is not 1 to 63 characters of a-z, "
                               "0-9, _ and -"))
            continue
        if name in file_names or name in seen:
            aside.append(Aside(number, name, "its name is a database of the file"
                               if name in file_names else "an earlier row has its name",
                               duplicate=True))
            continue
        seen.add(name)
        dsn, listen = row.get("dsn"), row.get("listen_dsn")
        problem = (_problem(dsn, "dsn", allowed, environ)
                   or (None if listen is None
                       else _problem(listen, "listen_dsn", allowed, environ)))
        if problem is not None:
            aside.append(Aside(number, name, problem))
            continue
        served.append(Database(name=name, dsn=resolve_dsn(dsn, {}),
                               listen_dsn=None if listen is None else resolve_dsn(listen, {})))
    return Listing(tuple(served), tuple(aside))


def host_key(host: str) -> str:
    """A host as the ``hosts`` list and a DSN are compared: without an IPv6 address's
    brackets, names in lower case (DNS names are)."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.lower()


def said(aside: Sequence[Aside], most: int = 5) -> str:
    """The rows set aside, for one line: ``NAME (REASON)``, the first ``most`` of them."""
    shown = "; ".join(f"{a.label}: {a.reason}" for a in aside[:most])
    more = len(aside) - most
    return shown + (f"; and {more} more" if more > 0 else "")


def _problem(value: Any, key: str, allowed: set[str] | None, environ: Mapping[str, str]
             ) -> str | None:
    """Why this DSN of a row cannot be used, or None; never quoting any of it."""
    if not isinstance(value, str) or not value.strip():
        return f"its {key} is missing or not text"
    if value.startswith("env:"):
        return (f"its {key} is env:NAME, which only the databases file may use: a catalog "
                "row gives the connection string itself")
    dsn = resolve_dsn(value, {})
    try:
        check_dsn(dsn)
        options = psycopg.conninfo.conninfo_to_dict(dsn)
    except (InvalidDsn, psycopg.ProgrammingError):
        return f"its {key} is not a connection string libpq can parse"
    for keyword in sorted(options):
        if keyword in _FILES or keyword.startswith("oauth_"):
            return (f"its {key} sets {keyword}, which would have the fleet use its own "
                    "files or reach another server")
        variable = _FLEET_DECIDES.get(keyword)
        if variable is not None and environ.get(variable):
            return (f"its {key} sets {keyword}, which the fleet's environment decides "
                    f"({variable})")
    return None if allowed is None else _outside(options, key, allowed)


def _outside(options: Mapping[str, Any], key: str, allowed: set[str]) -> str | None:
    """Why the hosts a DSN names are not all in the ``hosts`` list, or None."""
    if options.get("service"):
        return (f"its {key} names a service, whose hosts the catalog's hosts list cannot "
                "check")
    hosts = str(options.get("host") or "").split(",")
    addresses = str(options.get("hostaddr") or "").split(",")
    for host, address in zip_longest(hosts, addresses, fillvalue=""):
        if not host.strip() and not address.strip():
            return (f"its {key} names no host (libpq would take the fleet's default), and "
                    "the catalog's hosts list allows only those it names")
        if any(part.strip() and host_key(part) not in allowed for part in (host, address)):
            return f"its {key} names a host outside the catalog's hosts list"
    return None
