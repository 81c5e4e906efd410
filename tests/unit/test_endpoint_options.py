"""The endpoint options table against what repeats it by hand: the SQL and the spec."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from datetime import UTC, datetime
from pathlib import Path

import outbox.sql
from outbox.endpoints import (
    OPTIONS,
    REQUIRED,
    EndpointSpec,
    StoredEndpoint,
    as_json,
    as_viewer_json,
)
from outbox.endpoints._options import KEY_COLUMN, STORED_COLUMNS, VIEWER_COLUMNS
from outbox.sql import queries

# Columns of outbox.endpoints that are not an endpoint's definition: its identity, its state,
# the secrets a rotation keeps.
NOT_OPTIONS = {"id", "previous_secrets", "enabled", "disabled_reason", "created_at",
               "updated_at", "removed_at"}
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def _listed(text: str) -> list[str]:
    """The names of a comma-separated SQL list, as written (no expressions)."""
    return [name.strip() for name in text.split(",")]


def test_insert_names_every_stored_column_and_nothing_else() -> None:
    """endpoint_insert writes each column of the table, each from its own parameter, and
    whether the endpoint is guarded (saved with its URL checked)."""
    sql = queries["endpoint_insert"]
    match = re.search(r"INSERT INTO outbox\.endpoints\s*\((.*?)\)\s*VALUES\s*\((.*)\)\s*RETURNING",
                      sql, re.DOTALL)
    assert match, sql
    columns = _listed(match.group(1))
    values = [PLACEHOLDER.findall(value) for value in _listed(match.group(2))]
    assert sorted(columns) == sorted((*STORED_COLUMNS, "guarded"))
    assert values == [[column] for column in columns]


UNREAD = {"secret", "headers"}
"""The options that showing an endpoint never reads (but by kind and by name)."""
SHOWN_STATE = {"signing", "signing_previous_until", "header_names", "guarded", "dropping",
               "disabled_by"}


def test_live_reads_every_stored_column_but_the_secrets() -> None:
    """endpoints_live reads each option column but the secret and the headers, which it
    names by kind and by name; endpoints_full, a sync's, reads every column."""
    sql = queries["endpoints_live"]
    selected = _listed(sql[sql.index("SELECT") + 6:sql.index("FROM outbox.endpoints_shown")])
    assert set(selected) - NOT_OPTIONS - SHOWN_STATE == set(STORED_COLUMNS) - UNREAD
    assert len(selected) == len(set(selected))
    sql = queries["endpoints_full"]
    selected = _listed(sql[sql.index("SELECT") + 6:sql.index("FROM outbox.endpoints")])
    assert set(selected) - NOT_OPTIONS - SHOWN_STATE == set(STORED_COLUMNS)


def test_update_sets_every_option_column_but_the_secrets() -> None:
    """endpoint_update sets each option column from its own parameter but the secret and the
    headers, which it neither reads nor writes (endpoint_set_secret, _headers do); guarded
    only ever becomes true (sticky)."""
    sql = queries["endpoint_update"]
    body = sql[sql.index(" SET") + 4:sql.index("WHERE id")]
    assigned = dict(re.findall(r"^\s*(\w+) = (.*?),?$", body, re.MULTILINE))
    options = set(STORED_COLUMNS) - {KEY_COLUMN} - UNREAD
    assert assigned.pop("guarded") == "guarded OR %(guarded)s::boolean"
    assert set(assigned) - NOT_OPTIONS == options
    assert "secret" not in body
    assert "headers" not in body
    for column in options:
        assert PLACEHOLDER.findall(assigned[column]) == [column], column


def test_spec_fields_are_the_table_rows() -> None:
    """EndpointSpec has one field per option, in the table's order, defaulting as it says."""
    spec_fields = [f for f in fields(EndpointSpec) if f.name != "name"]
    assert [f.name for f in spec_fields] == [option.field for option in OPTIONS]
    for option, spec_field in zip(OPTIONS, spec_fields, strict=True):
        given = (spec_field.default if spec_field.default is not MISSING
                 else spec_field.default_factory() if spec_field.default_factory is not MISSING
                 else REQUIRED)
        assert given == option.default, option.field


def test_columns_are_the_stored_columns() -> None:
    """A spec's column values are keyed by exactly the columns the store writes, in order."""
    assert list(EndpointSpec(name="a", url="https://h.test/").columns()) == list(STORED_COLUMNS)


def test_flags_and_keys_are_unique() -> None:
    """No two options share a field, a column or a flag."""
    for key in ("field", "column", "flag"):
        values = [getattr(option, key) for option in OPTIONS]
        assert len(values) == len(set(values)), key


def test_the_viewer_reads_exactly_the_options_it_may() -> None:
    """web_endpoint_options and the viewer's grant name each option column the viewer may read,
    and none of the others."""
    sql = queries["web_endpoint_options"]
    selected = {name.strip().removeprefix("e.") for name in _listed(
        sql[sql.index("SELECT") + 6:sql.index("FROM outbox.endpoints")])}
    state = {"enabled", "disabled_reason", "created_at", "updated_at", "guarded", "dropping",
             "disabled_by"}
    assert selected - state == set(VIEWER_COLUMNS)
    grants = (Path(outbox.sql.__file__).parent / "grants_viewer.sql").read_text("utf-8")
    match = re.search(r"GRANT SELECT \((.*?)\)\s*ON outbox\.endpoints TO", grants, re.DOTALL)
    assert match, grants
    granted = {name.strip() for name in match.group(1).split(",")}
    assert set(VIEWER_COLUMNS) <= granted
    assert not granted & (set(STORED_COLUMNS) - set(VIEWER_COLUMNS))


def test_the_viewers_object_is_list_json_with_nulls() -> None:
    """The web view's object for the viewer has list --json's keys in its order, null for what
    the viewer may not read and the same values for the rest."""
    spec = EndpointSpec(name="a", url="https://h.test/?token=t", secret=SECRET,
                        headers={"authorization": "x"}, tenant="acme", max_pending=9,
                        description="Acme's hook", keep_dead=86400)
    now = datetime(2026, 1, 2, tzinfo=UTC)
    stored = StoredEndpoint(id=1, enabled=False, disabled_reason="why", created_at=now,
                            updated_at=now, columns=spec.columns(), disabled_by="operator")
    shown = as_json(stored)
    row = {column: spec.columns()[column] for column in VIEWER_COLUMNS}
    seen = as_viewer_json({**row, "enabled": False, "disabled_reason": "why",
                           "disabled_by": "operator", "dropping": False, "guarded": False,
                           "created_at": now, "updated_at": now})
    assert list(seen) == list(shown)
    hidden = {key for key, value in seen.items() if value is None}
    assert hidden == {"url", "signing", "signing_previous_until", "headers", "ca_file",
                      "client_cert", "client_key", "rate_limit", "max_pending_per_tenant"}
    assert {k: v for k, v in shown.items() if k not in hidden} == {
        k: v for k, v in seen.items() if k not in hidden}
