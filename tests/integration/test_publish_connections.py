"""Every kind of connection a caller may hold publishes inside its own transaction.

Each kind is driven the same way: publish, roll back, publish again (one
event and a batch of two), commit; another session must then see exactly
the committed events. The first publish of each transaction goes through a
connection or session that has not begun a transaction yet, so SQLAlchemy's
autobegin is exercised on both the rollback and the commit path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import outbox
from tests.support.connections import KINDS
from tests.support.publishing import add_endpoint, committed_event_ids, delivery_count


@pytest.mark.parametrize("kind", KINDS, ids=[k.__name__ for k in KINDS])
def test_publish_lives_and_dies_with_the_callers_transaction(
        kind: Callable[[str], Any], conn: psycopg.Connection[Any], dsn: str) -> None:
    """Rollback -> nothing; commit -> the events, through every supported connection kind."""
    add_endpoint(conn, "all")
    with kind(dsn) as handle:
        if handle.in_transaction is not None:
            assert not handle.in_transaction()  # autobegin is part of the promise
        handle.publish("kind.rolled_back")
        handle.publish_many(["kind.rolled_back", "kind.rolled_back"])
        handle.rollback()
        assert committed_event_ids(dsn) == []

        if handle.in_transaction is not None:
            assert not handle.in_transaction()
        first = handle.publish("kind.committed")
        batch = handle.publish_many(["kind.committed", "kind.committed"])
        assert committed_event_ids(dsn) == []  # nothing visible before the commit
        handle.commit()
    assert committed_event_ids(dsn) == [first, *batch]
    assert delivery_count(dsn) == 3


def test_unsupported_object_is_refused_before_sql() -> None:
    """Something that is no connection is refused with a TypeError naming what is accepted."""
    with pytest.raises(TypeError, match="psycopg connection"):
        outbox.publish(object(), "mail.received", {})
    with pytest.raises(TypeError, match="AsyncConnection"):
        asyncio.run(outbox.apublish(object(), "mail.received", {}))


def test_a_direct_connection_keeps_its_prepared_statements(dsn: str) -> None:
    """Without a pooler in between, publish leaves preparing to the connection's threshold."""
    from outbox._driver import _POOLED, _pooled_answer

    with psycopg.connect(dsn) as conn:
        for _ in range(6):  # past psycopg's prepare_threshold (5)
            outbox.publish(conn, "t", {})
        assert _POOLED[conn] is False
    assert _pooled_answer(4242, [(4242,)]) is False
    assert _pooled_answer(4242, [(1717,)]) is True
