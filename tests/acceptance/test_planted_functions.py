"""The Python functions an application calls on its own connection (``outbox.endpoints``,
``outbox.admin``) resolve nothing through that connection's ``search_path``, and give the
caller's transaction its own path back.

The database is the one of ``test_planted_code``: the application owns it,
PUBLIC may create in ``public``, look-alikes of the built-in operators and
functions are planted in ``public`` and in a schema named after each other
role, and ``ALTER DATABASE ... SET search_path = "$user", public, pg_catalog``
puts them before the built-ins for every session that does not pin its own.
The operator connects as an application would: a plain connection, no options.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from outbox import admin, endpoints, history, retention
from outbox.admin import EventFilter
from tests.acceptance.test_planted_code import SECRET, Owned, _plant, _publish, owned
from tests.support import planted
from tests.support.cli import run_outbox
from tests.support.roles import ok

__all__ = ["owned"]  # the fixture, shared with test_planted_code

_PATH = '"$user", public, pg_catalog'


def _ready(owned: Owned) -> list[uuid.UUID]:
    op = owned.dsn(owned.operator)
    ok(run_outbox(op, "migrate"))
    ok(run_outbox(op, "grants", "--application", owned.application, "--dispatcher",
                  owned.dispatcher, "--viewer", owned.viewer, "--apply"))
    ok(run_outbox(op, "endpoints", "add", "rx", "--url", "http://127.0.0.1:9/rx", "--events",
                  "order.*", "--secret", SECRET, "--max-pending-per-tenant", "100"))
    _plant(owned)
    return _publish(owned, 4)


def _calls(conn: psycopg.Connection[Any], ids: list[uuid.UUID]) -> None:
    """Every function of outbox.endpoints and outbox.admin, once."""
    endpoints.add(conn, "extra", url="https://example.com/x", events=["order.*"],
                  headers={"Authorization": "Bearer x"}, max_pending=10, tenant="tenant-0")
    endpoints.update(conn, "extra", timeout=3.5, headers={"X-A": "b"}, rate_limit=2.5)
    endpoints.get(conn, "extra")
    endpoints.list(conn, tenant="tenant-0")
    endpoints.disable(conn, "extra")
    endpoints.enable(conn, "extra")
    endpoints.retry_now(conn, "rx", tenant="tenant-1")
    endpoints.rotate_secret(conn, "extra", overlap="1h")
    endpoints.remove(conn, "extra", force=True)
    admin.status(conn)
    admin.tenant_backlogs(conn)
    admin.key_waits(conn)
    admin.horizon(conn)
    admin.dead_letters(conn, where=EventFilter(types=("order.*",)))
    admin.events(conn, where=EventFilter(tenant="tenant-1"), key="customer-1")
    admin.retry_dead(conn, everything=True, dry_run=True)
    admin.discard_dead(conn, everything=True, dry_run=True)
    admin.replay(conn, "rx", event_ids=ids[:2], types=("order.*",))
    admin.replay(conn, "rx", since=timedelta(hours=1), dry_run=True)
    history.show(conn, ids[0])
    retention.would_purge(conn, timedelta(days=1))


def _path(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_catalog.current_setting('search_path')").fetchone()
    assert row is not None
    return str(row[0])


def test_the_functions_run_nothing_planted_on_the_callers_path(owned: Owned) -> None:
    """Called on a plain connection whose path puts planted look-alikes first, inside the
    caller's transaction and in autocommit, no function of outbox.endpoints or
    outbox.admin runs planted code, and the caller's transaction keeps its own path;
    the same connection's own statement does run the look-alike (the control)."""
    ids = _ready(owned)
    op = owned.dsn(owned.operator)
    with psycopg.connect(op) as conn:
        assert _path(conn) == _PATH
        _calls(conn, ids)
        assert _path(conn) == _PATH  # still in the caller's transaction, its path back
        conn.rollback()
    with psycopg.connect(op, autocommit=True) as conn:
        _calls(conn, ids)
        assert _path(conn) == _PATH

    async def twins() -> None:
        async with await psycopg.AsyncConnection.connect(op) as aconn:
            await endpoints.aadd(aconn, "async", url="https://example.com/a",
                                 tenant="tenant-1")
            await endpoints.aupdate(aconn, "async", max_in_flight=2)
            await endpoints.alist(aconn)
            await endpoints.aremove(aconn, "async")
            cur = await aconn.execute("SELECT pg_catalog.current_setting('search_path')")
            assert await cur.fetchone() == (_PATH,)

    asyncio.run(twins())
    with psycopg.connect(owned.cluster.dsn_for(owned.database), autocommit=True) as su:
        ran = planted.runs(su)
    assert [run for run in ran if run[0] == owned.operator] == [], planted.details(su)
    with psycopg.connect(op, autocommit=True) as unpinned:  # the control
        unpinned.execute("SELECT 2::numeric * 1.5::float8")
        assert (owned.operator, f"{owned.operator}.*(numeric, double precision)"
                ) in planted.runs(unpinned)


def test_a_refused_call_gives_the_path_back_too(owned: Owned) -> None:
    """A call refused after its first statement (an unknown endpoint) leaves the caller's
    transaction usable, on its own path, with nothing written."""
    _ready(owned)
    with psycopg.connect(owned.dsn(owned.operator)) as conn:
        with pytest.raises(endpoints.EndpointNotFound):
            endpoints.update(conn, "nobody", timeout=2)
        assert _path(conn) == _PATH
        assert conn.execute("SELECT count(*) FROM outbox.endpoints").fetchone() == (1,)
