"""The endpoint options table against what repeats it by hand: the SQL and the spec."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields

from outbox.endpoints import OPTIONS, REQUIRED, EndpointSpec
from outbox.endpoints._options import KEY_COLUMN, STORED_COLUMNS
from outbox.sql import queries

# Columns of outbox.endpoints that are not an endpoint's definition: its identity, its state,
# the secrets a rotation keeps.
NOT_OPTIONS = {"id", "previous_secrets", "enabled", "disabled_reason", "created_at",
               "updated_at", "removed_at"}
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def _listed(text: str) -> list[str]:
    """The names of a comma-separated SQL list, as written (no expressions)."""
    return [name.strip() for name in text.split(",")]


def test_insert_names_every_stored_column_and_nothing_else() -> None:
    """endpoint_insert writes each column of the table, each from its own parameter."""
    sql = queries["endpoint_insert"]
    match = re.search(r"INSERT INTO outbox\.endpoints\s*\((.*?)\)\s*VALUES\s*\((.*)\)\s*RETURNING",
                      sql, re.DOTALL)
    assert match, sql
    columns = _listed(match.group(1))
    values = [PLACEHOLDER.findall(value) for value in _listed(match.group(2))]
    assert sorted(columns) == sorted(STORED_COLUMNS)
    assert values == [[column] for column in columns]


def test_replace_sets_every_option_column_and_nothing_else() -> None:
    """endpoint_replace sets each option column from its own parameter, the name never."""
    sql = queries["endpoint_replace"]
    body = sql[sql.index(" SET") + 4:sql.index("WHERE id")]
    assigned = dict(re.findall(r"^\s*(\w+) = (.*?),?$", body, re.MULTILINE))
    options = set(STORED_COLUMNS) - {KEY_COLUMN}
    assert set(assigned) - NOT_OPTIONS == options
    for column in options:
        assert PLACEHOLDER.findall(assigned[column]) == [column], column


def test_live_reads_every_stored_column() -> None:
    """endpoints_live reads each column of the table, besides the endpoint's identity and state."""
    sql = queries["endpoints_live"]
    selected = _listed(sql[sql.index("SELECT") + 6:sql.index("FROM outbox.endpoints")])
    assert set(selected) - NOT_OPTIONS == set(STORED_COLUMNS)
    assert len(selected) == len(set(selected))


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
