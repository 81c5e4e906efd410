"""The catalog's rows admitted one at a time: each bad row set aside alone, never quoted."""

from __future__ import annotations

from typing import Any

import pytest

from outbox._shared.catalog_rows import admit, host_key

SECRET = "whsec_c2VjcmV0LXZhbHVlLW9mLXRoZS1mbGVldHMtZW52"
ENV = {"OUTBOX_SECRET_X": SECRET, "PGSSLMODE": "verify-full"}
GOOD = "host=db-1.internal dbname=a"


def _admit(*rows: dict[str, Any], hosts: list[str] | None = None,
           taken: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    listing = admit(rows, taken=taken, hosts=hosts, environ=ENV)
    return [d.name for d in listing.databases], {a.label: a.reason for a in listing.aside}


def test_good_rows_are_served_in_order() -> None:
    """Rows with good names and DSNs are served in the query's order, listen_dsn kept."""
    listing = admit([{"name": "a", "dsn": GOOD, "listen_dsn": "host=db-1.internal"},
                     {"name": "b", "dsn": "postgres://db-2.internal/b"}],
                    taken=(), hosts=None, environ=ENV)
    assert [d.name for d in listing.databases] == ["a", "b"]
    assert listing.databases[0].listen_dsn == "host=db-1.internal"
    assert listing.databases[1].dsn == "postgresql://db-2.internal/b"
    assert listing.aside == ()


@pytest.mark.parametrize(("row", "label", "says"), [
    ({"name": "Bad Name", "dsn": GOOD}, "#1", "its name is not 1 to 63"),
    ({"name": 5, "dsn": GOOD}, "#1", "its name is not 1 to 63"),
    ({"name": "c", "dsn": None}, "c", "its dsn is missing"),
    ({"name": "c", "dsn": 42}, "c", "its dsn is missing or not text"),
    ({"name": "c", "dsn": "env:OUTBOX_SECRET_X"}, "c", "its dsn is env:NAME"),
    ({"name": "c", "dsn": GOOD, "listen_dsn": "env:OUTBOX_SECRET_X"}, "c",
     "its listen_dsn is env:NAME"),
    ({"name": "c", "dsn": f"{SECRET} host=x"}, "c", "not a connection string libpq can parse"),
    ({"name": "c", "dsn": "host=x port=abc"}, "c", "not a connection string"),
    ({"name": "c", "dsn": "mysql://x/y"}, "c", "not a connection string"),
    ({"name": "c", "dsn": "host=x passfile=/etc/outbox/pgpass"}, "c", "sets passfile"),
    # Keywords of libpq 18: an older libpq cannot parse them, and sets the row aside for it.
    ({"name": "c", "dsn": "host=x sslkeylogfile=/tmp/keys"}, "c",
     ("sets sslkeylogfile", "libpq can parse")),
    ({"name": "c", "dsn": "host=x oauth_issuer=https://evil.example"}, "c",
     ("sets oauth_issuer", "libpq can parse")),
    ({"name": "c", "dsn": "host=x sslmode=disable"}, "c",
     "sets sslmode, which the fleet's environment decides (PGSSLMODE)"),
])
def test_a_bad_row_is_set_aside_alone_and_never_quoted(row: dict[str, Any], label: str,
                                                       says: str | tuple[str, ...]) -> None:
    """A bad row is set aside with its reason, the others served; no value of it is shown."""
    served, aside = _admit({"name": "a", "dsn": GOOD}, row, {"name": "b", "dsn": GOOD})
    assert served == ["a", "b"]
    assert label.replace("#1", "#2") in aside
    reason = aside[label.replace("#1", "#2")]
    assert any(words in reason for words in ((says,) if isinstance(says, str) else says))
    for value in row.values():
        if isinstance(value, str) and value not in ("c",):
            assert value not in reason
    assert SECRET not in reason


def test_a_name_taken_by_the_file_or_an_earlier_row_is_set_aside() -> None:
    """The file's entry wins over a row of its name; the first of two rows wins."""
    served, aside = _admit({"name": "a", "dsn": GOOD}, {"name": "f", "dsn": GOOD},
                           {"name": "a", "dsn": "host=elsewhere"}, taken=("f",))
    assert served == ["a"]
    assert aside == {"f #2": "its name is a database of the file",
                     "a #3": "an earlier row has its name"}


def test_sslmode_is_the_rows_own_while_the_environment_sets_none() -> None:
    """A row may set TLS keywords the fleet's environment leaves open."""
    listing = admit([{"name": "a", "dsn": "host=x sslmode=require"}], taken=(), hosts=None,
                    environ={})
    assert [d.name for d in listing.databases] == ["a"]


@pytest.mark.parametrize(("dsn", "served"), [
    ("host=db-1.internal dbname=a", True),
    ("postgresql://DB-1.Internal:5433/a", True),
    ("host=db-1.internal,10.0.0.5 dbname=a", True),
    ("postgresql://[2001:db8::1]/a", True),
    ("host=db-1.internal hostaddr=10.0.0.5", True),
    ("host=db-1.internal hostaddr=10.0.0.6", False),
    ("host=db-1.internal,db-9.internal", False),
    ("host=evil.example dbname=a", False),
    ("dbname=a", False),  # libpq would take PGHOST or its socket
    ("host=db-1.internal, dbname=a", False),
    ("service=tenants", False),
    ("postgresql:///a?host=/var/run/postgresql", False),
])
def test_the_hosts_list_allows_only_the_hosts_it_names(dsn: str, served: bool) -> None:
    """With hosts, every host a row's DSN names is listed; a DSN naming none is set aside."""
    names, aside = _admit({"name": "a", "dsn": dsn},
                          hosts=["db-1.internal", "10.0.0.5", "[2001:db8::1]"])
    assert names == (["a"] if served else [])
    if not served:
        assert "host" in aside["a"] or "service" in aside["a"]
        assert "evil" not in aside["a"]


def test_host_key_ignores_brackets_and_case() -> None:
    """[::1] and ::1 are one host, as are DB-1 and db-1."""
    assert host_key("[::1]") == host_key("::1")
    assert host_key(" DB-1.Internal ") == "db-1.internal"
