"""The SQL files and the QueryName type name the same queries, so a typo fails mypy, not prod."""

from __future__ import annotations

from typing import get_args

from outbox.sql import QueryName, queries


def test_every_declared_name_is_a_query_and_every_query_is_declared() -> None:
    """QueryName lists exactly the named blocks of outbox/sql/queries/*.sql."""
    assert set(get_args(QueryName)) == set(queries)


def test_every_query_has_text() -> None:
    """No named block is empty (a name line followed by nothing)."""
    assert all(text.strip() for text in queries.values())
