"""receive.first_time: a record in the caller's transaction, right under concurrency."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from outbox import SchemaMissing, receive
from tests.support.connections import KINDS, Handle
from tests.support.dispatcher import wait_until


def recorded(dsn: str) -> list[tuple[str, str]]:
    """(consumer, event_id) of every committed inbox record."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT consumer, event_id FROM outbox.inbox ORDER BY 1, 2")
        return [(str(c), str(e)) for c, e in rows]


def first(handle: Handle, event_id: str, consumer: str = "default") -> bool:
    """first_time through whatever ``handle`` holds, sync or async."""
    if handle.runner is not None:
        return handle.runner.run(receive.afirst_time(handle.target, event_id,
                                                     consumer=consumer))
    return receive.first_time(handle.target, event_id, consumer=consumer)


@pytest.mark.parametrize("kind", KINDS, ids=[k.__name__ for k in KINDS])
def test_first_time_lives_and_dies_with_the_callers_transaction(
        kind: Callable[[str], Any], dsn: str) -> None:
    """Through every kind publish() takes: True once, then False; rollback forgets, commit keeps."""
    event_id = str(uuid.uuid4())
    with kind(dsn) as handle:
        assert first(handle, event_id) is True
        assert first(handle, event_id) is False  # earlier in this transaction
        assert first(handle, event_id, "billing") is True  # consumers are independent
        handle.rollback()
        assert recorded(dsn) == []
        assert first(handle, event_id) is True  # the rolled back record never was
        assert recorded(dsn) == []  # nothing committed on our behalf
        handle.commit()
        assert first(handle, event_id) is False  # committed by a transaction before
        assert first(handle, event_id, "billing") is True
        handle.commit()
    assert recorded(dsn) == [("billing", event_id), ("default", event_id)]


class Contender(threading.Thread):
    """first_time in a transaction of its own, on a thread, at an isolation level."""

    def __init__(self, dsn: str, event_id: str, isolation: str = "READ COMMITTED") -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, application_name="contender")
        self.conn.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        self.conn.execute("SELECT 1")  # the snapshot, for REPEATABLE READ
        self.event_id = event_id
        self.result: bool | BaseException | None = None

    def run(self) -> None:
        try:
            self.result = receive.first_time(self.conn, self.event_id)
            self.conn.commit()
        except Exception as exc:
            self.result = exc
            self.conn.rollback()
        finally:
            self.conn.close()


def waiting_on_a_lock(dsn: str) -> bool:
    """Whether the contender's session is waiting for a lock right now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                           "'contender' AND wait_event_type = 'Lock'").fetchone()
    return bool(row and row[0])


@pytest.fixture
def holder(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A transaction that recorded an event and is still open."""
    with psycopg.connect(dsn) as conn:
        yield conn


@pytest.mark.parametrize(("ending", "expected"), [("commit", False), ("rollback", True)])
def test_a_concurrent_record_is_waited_for(
        dsn: str, holder: psycopg.Connection[Any], ending: str, expected: bool) -> None:
    """Two transactions record one id at once: the second waits; commit: False, rollback: True."""
    event_id = str(uuid.uuid4())
    assert receive.first_time(holder, event_id) is True
    contender = Contender(dsn, event_id)
    contender.start()
    wait_until(lambda: waiting_on_a_lock(dsn), 10, "the second transaction to wait")
    assert contender.result is None
    getattr(holder, ending)()
    contender.join(10)
    assert contender.result is expected
    assert recorded(dsn) == [("default", event_id)]


def test_repeatable_read_ends_the_wait_in_a_serialization_failure(
        dsn: str, holder: psycopg.Connection[Any]) -> None:
    """Under REPEATABLE READ, a record committed after the snapshot is a serialization failure."""
    event_id = str(uuid.uuid4())
    contender = Contender(dsn, event_id, "REPEATABLE READ")
    assert receive.first_time(holder, event_id) is True
    contender.start()
    wait_until(lambda: waiting_on_a_lock(dsn), 10, "the second transaction to wait")
    holder.commit()
    contender.join(10)
    assert isinstance(contender.result, psycopg.errors.SerializationFailure)


def test_event_ids_may_be_uuids_and_bad_input_is_refused_before_sql(
        conn: psycopg.Connection[Any]) -> None:
    """A UUID is taken as its text; empty, NUL, over-long or non-text input raises first."""
    event_id = uuid.uuid4()
    assert receive.first_time(conn, event_id) is True
    assert receive.first_time(conn, str(event_id)) is False
    for bad in ("", "a\x00b", "x" * 1001):
        with pytest.raises(ValueError, match="event_id"):
            receive.first_time(conn, bad)
    with pytest.raises(ValueError, match="consumer"):
        receive.first_time(conn, "e", consumer="")
    with pytest.raises(TypeError, match="event_id must be a str"):
        receive.first_time(conn, 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="record a first time"):
        receive.first_time(object(), "e")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # still usable
    assert receive.first_time(conn, "e") is True


def test_a_database_without_the_inbox_says_so(empty_dsn: str) -> None:
    """No inbox table: SchemaMissing naming `outbox migrate --inbox-only`, sync and async."""
    with psycopg.connect(empty_dsn) as conn, pytest.raises(SchemaMissing, match="inbox-only"):
        receive.first_time(conn, "e")

    async def attempt() -> None:
        async with await psycopg.AsyncConnection.connect(empty_dsn) as aconn:
            await receive.afirst_time(aconn, "e")

    with pytest.raises(SchemaMissing, match=r"outbox\.inbox"):
        asyncio.run(attempt())
