"""check_dsn: a malformed connection string is refused in one line that never holds its password."""

from __future__ import annotations

import pytest

from outbox._shared.dsn import InvalidDsn, check_dsn, resolve_dsn, server_options

PASSWORD = "S3cr3t-Pw9"
# Malformed strings carrying PASSWORD, and a word of what the refusal still says.
MALFORMED = [
    (f"postgresql://u:{PASSWORD}@db.internal:notaport/app", "port"),
    (f"password={PASSWORD} port=x", "port"),
    (f"host=db password='{PASSWORD}' port=99999", "port"),
    (f"postgresql://u:{PASSWORD}@db.internal:5432,db2.internal:x/app", "port"),
    (f"postgresql://u:{PASSWORD[:4]}%zz{PASSWORD[4:]}@db.internal/app", "percent-encoded"),
    (f"postgresql://u:{PASSWORD}%00@db.internal/app", "%00"),
    (f"postgresql://u:{PASSWORD}@[::1/app", "IPv6"),
    (f"postgresql://u:{PASSWORD}@[]/app", "IPv6"),
    (f"postgresql://u:{PASSWORD}@[::1]x/app", "unexpected character"),
    (f"postgresql://u:{PASSWORD[:4]} {PASSWORD[4:]}@db.internal/app", "spaces"),
    (f"postgresql://u:{PASSWORD[:4]}/{PASSWORD[4:]}@db.internal/app", "port"),
    (f"postgresql://u@db.internal/app?password={PASSWORD}%zz", "percent-encoded"),
    (f"postgresql://u@db.internal/app?sslpassword={PASSWORD}%zz", "percent-encoded"),
    (f"password={PASSWORD} bogus=1", "connection option"),
    (f"password=my {PASSWORD}=x", "connection option"),
    (f"password={PASSWORD} port", "missing"),
    (f"host=db password='{PASSWORD}", "unterminated"),
]


@pytest.mark.parametrize(("dsn", "says"), MALFORMED, ids=[d for d, _ in MALFORMED])
def test_refusal_never_repeats_the_password(dsn: str, says: str) -> None:
    """libpq's reason is kept where it is useful, with any password-looking part masked."""
    with pytest.raises(InvalidDsn) as info:
        check_dsn(dsn)
    message = str(info.value)
    assert message.startswith("invalid database URL or DSN: ")
    assert says in message
    assert "\n" not in message
    for piece in (PASSWORD, PASSWORD[:4], PASSWORD[4:], PASSWORD[2:6]):
        assert piece not in message


@pytest.mark.parametrize(("dsn", "message"), [
    ("host=db bogus=1", 'invalid connection option "bogus"'),
    ("postgresql://db.internal/app?bogus=1", 'invalid URI query parameter: "bogus"'),
    ("postgresql://db.internal:notaport/app", 'port "notaport" is not a number'),
    ("host=db port=0", 'port "0" is not a number'),
    ("postgresql://[::1/app", 'URI: "postgresql://[::1/app"'),
])
def test_without_a_password_libpq_text_is_shown_whole(dsn: str, message: str) -> None:
    """Nothing is masked when the string holds no password: the operator sees what is wrong."""
    with pytest.raises(InvalidDsn, match=message.replace("[", r"\[")):
        check_dsn(dsn)


def test_a_password_shown_by_some_other_wording_falls_back_to_no_reason() -> None:
    """Whatever libpq says, a password left in the text after masking drops the text."""
    with pytest.raises(InvalidDsn) as info:
        check_dsn("password=port port=x")
    assert "port" not in str(info.value).removeprefix("invalid database URL or DSN: ")


def test_undecodable_bytes_are_refused_in_one_line() -> None:
    """Bytes that are not UTF-8 (surrogate escapes from argv) are bad usage, not a crash."""
    with pytest.raises(InvalidDsn, match="not valid UTF-8"):
        check_dsn(f"password={PASSWORD}\udcff")


@pytest.mark.parametrize("dsn", [
    "", "host=db port=5432", f"postgresql://u:{PASSWORD}@db.internal:5432/app",
    "postgresql://db1:5432,db2:5433/app", f"host=db password='{PASSWORD} x' port=6432",
    "postgresql:///app?host=/var/run/postgresql",
])
def test_valid_strings_pass(dsn: str) -> None:
    """Well-formed strings, with a password or not, are accepted."""
    check_dsn(dsn)


def test_resolve_dsn_reduces_sqlalchemy_urls() -> None:
    """A postgresql+psycopg:// URL, as written for an ORM, is reduced to libpq's form."""
    assert resolve_dsn(None, {"DATABASE_URL": "postgresql+psycopg://h/db"}) == "postgresql://h/db"
    assert resolve_dsn(None, {"OUTBOX_DSN": "postgres://h/db"}) == "postgresql://h/db"


def test_server_options_keep_the_dsns_own() -> None:
    """Options given in the DSN survive ours being added after them; its search_path does
    not win: the pinned one comes after it."""
    assert server_options("postgresql://h/db?options=-c%20work_mem%3D8MB", "-c jit=off") == \
        "-c work_mem=8MB -c search_path=pg_catalog,pg_temp -c jit=off"
    assert server_options("postgresql://h/db?options=-c%20search_path%3Dapp") == \
        "-c search_path=app -c search_path=pg_catalog,pg_temp"
    assert server_options("host=h dbname=db", "-c jit=off") == \
        "-c search_path=pg_catalog,pg_temp -c jit=off"
