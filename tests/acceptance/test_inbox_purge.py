"""`outbox purge` forgets old inbox records, also on a receiver's inbox-only database;
the dispatcher's retention leaves them alone."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from outbox import receive
from outbox.retention import apurge
from tests.support.cli import run_outbox
from tests.support.receiving import inbox_only as make_inbox_only


def record(dsn: str, *ids: str, days_ago: int = 0, consumer: str = "default") -> None:
    """Record ``ids`` as processed, ``days_ago`` days back, committed."""
    with psycopg.connect(dsn) as conn:
        for event_id in ids:
            assert receive.first_time(conn, event_id, consumer=consumer)
        conn.execute("UPDATE outbox.inbox SET processed_at = now() - make_interval(days => %s)"
                     " WHERE event_id = ANY(%s)", (days_ago, list(ids)))
        conn.commit()


def remaining(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [str(e) for (e,) in conn.execute("SELECT event_id FROM outbox.inbox ORDER BY 1")]


@pytest.fixture
def inbox_only(empty_dsn: str) -> str:
    """A receiver's own database: the outbox schema holds the inbox and nothing else."""
    make_inbox_only(empty_dsn)
    return empty_dsn


def test_purge_removes_inbox_records_older_than_the_duration(dsn: str) -> None:
    """purge --older-than 7d deletes records processed 8 days ago and keeps recent ones."""
    record(dsn, "old-1", "old-2", days_ago=8)
    record(dsn, "old-3", days_ago=8, consumer="billing")
    record(dsn, "new-1", days_ago=1)
    result = run_outbox(dsn, "purge", "--older-than", "7d")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("purged 0 delivered or discarded deliveries, 0 events "
                                     "and 3 inbox records")
    assert remaining(dsn) == ["new-1"]


def test_a_purged_record_is_processed_again(dsn: str) -> None:
    """Once its record is purged, the same event id is a first time again."""
    record(dsn, "e", days_ago=8)
    assert run_outbox(dsn, "purge", "--older-than", "7d").returncode == 0
    with psycopg.connect(dsn) as conn:
        assert receive.first_time(conn, "e") is True


def test_purge_works_on_an_inbox_only_database(inbox_only: str) -> None:
    """A database with only the inbox: first_time works and purge purges it, exit 0."""
    record(inbox_only, "old", days_ago=30)
    record(inbox_only, "new")
    result = run_outbox(inbox_only, "purge", "--older-than", "7d")
    assert result.returncode == 0, result.stderr
    assert "1 inbox record" in result.stdout
    assert remaining(inbox_only) == ["new"]


def test_purge_without_any_outbox_table_fails_saying_so(empty_dsn: str) -> None:
    """Neither events nor inbox: exit 1 with the migrate advice."""
    result = run_outbox(empty_dsn, "purge", "--older-than", "7d")
    assert result.returncode == 1
    assert "outbox migrate" in result.stderr


def test_the_dispatchers_retention_leaves_inbox_records_alone(dsn: str) -> None:
    """The purge the dispatcher's --retention runs keeps every inbox record, however old."""
    record(dsn, "old", days_ago=30)

    async def retention() -> Any:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await apurge(conn, timedelta(days=7))  # as dispatcher.maintenance calls it

    assert asyncio.run(retention()).inbox == 0
    assert remaining(dsn) == ["old"]
