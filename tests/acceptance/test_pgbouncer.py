"""Behind PgBouncer in transaction mode (contract v3): publish() and the dispatcher as they are.

Debian's pgbouncer (1.18: no prepared statements across transactions), with
its default ``ignore_startup_parameters`` (none), started on 127.0.0.1 in
front of the test cluster. Skipped where pgbouncer is not installed
(``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import outbox
from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support.dispatcher import (
    Dispatcher,
    add_endpoint,
    run_once,
    wait_all_finished,
    wait_for_state,
    wait_until,
)
from tests.support.pgbouncer import PgBouncer, find_pgbouncer
from tests.support.publishing import committed

pytestmark = pytest.mark.skipif(find_pgbouncer() is None, reason="pgbouncer is not installed "
                                "(Debian: apt-get install pgbouncer)")

LISTEN_WARNING = "LISTEN does not work"


@pytest.fixture(scope="module")
def bouncer(cluster: Cluster) -> Iterator[PgBouncer]:
    with PgBouncer(cluster.admin_dsn, pool_size=4) as running:
        yield running


def test_publish_through_the_pooler(dsn: str, bouncer: PgBouncer) -> None:
    """publish(), publish_many() and idempotency keys work through PgBouncer on a connection
    opened as psycopg advises for PgBouncer before 1.21 (no prepared statements)."""
    with psycopg.connect(dsn) as direct:
        add_endpoint(direct, "hook", "http://127.0.0.1:9/")
    ids = []
    with psycopg.connect(bouncer.dsn_for(dsn), prepare_threshold=None) as conn:
        for n in range(12):
            ids.append(outbox.publish(conn, "order.created", {"n": n}, key=f"k{n % 3}",
                                      idempotency_key=f"i{n % 6}"))
            conn.commit()
        ids += outbox.publish_many(conn, [outbox.Event("order.created", {"n": n})
                                          for n in range(5)])
        conn.commit()
    assert ids[6:12] == ids[:6]  # the same idempotency keys give the first ids back
    assert committed(dsn, "SELECT count(*) FROM outbox.events") == [(11,)]
    assert committed(dsn, "SELECT count(*) FROM outbox.deliveries") == [(11,)]


def test_dispatcher_through_the_pooler_warns_once_and_polls(
        dsn: str, bouncer: PgBouncer, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """Without --listen-dsn, the dispatcher becomes ready, says once that LISTEN does not work,
    and delivers everything by polling."""
    add_endpoint(conn, "hook", receiver.url)
    with Dispatcher(bouncer.dsn_for(dsn)) as dispatcher:
        dispatcher.wait_serving()
        wait_until(lambda: LISTEN_WARNING in dispatcher.log() or None, timeout=30,
                   what="the LISTEN warning", dispatcher=dispatcher)
        for n in range(40):
            outbox.publish(conn, "order.created", {"n": n}, key=f"k{n % 4}")
            conn.commit()
        wait_all_finished(conn, 40, dispatcher=dispatcher)
        assert dispatcher.stop() == 0
        log = dispatcher.log()
    assert len(receiver.snapshot()) == 40
    assert log.count(LISTEN_WARNING) == 1, log
    assert "WARNING" in log.split(LISTEN_WARNING)[0].splitlines()[-1]
    assert "--listen-dsn" in log
    assert "settings per transaction, no prepared statements" in log
    assert "Traceback" not in log, log


def test_listen_dsn_wakes_single_events(
        dsn: str, bouncer: PgBouncer, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """With --listen-dsn naming a direct connection, single events published through the
    pooler are woken by their notification, not found by a (30 s) poll."""
    add_endpoint(conn, "hook", receiver.url)
    with psycopg.connect(bouncer.dsn_for(dsn), prepare_threshold=None) as producer, \
            Dispatcher(bouncer.dsn_for(dsn), "--listen-dsn", dsn,
                       "--poll-interval", "30") as dispatcher:
        dispatcher.wait_serving()
        time.sleep(1.0)  # past the start's claims; from here on only a wake-up finds work
        for n in range(3):
            event_id = outbox.publish(producer, "order.created", {"n": n})
            producer.commit()
            started = time.monotonic()
            wait_for_state(conn, event_id, "delivered", timeout=15, dispatcher=dispatcher)
            assert time.monotonic() - started < 15
        assert dispatcher.stop() == 0
        log = dispatcher.log()
    assert LISTEN_WARNING not in log, log


def test_once_through_the_pooler(dsn: str, bouncer: PgBouncer, conn: psycopg.Connection[Any],
                                 receiver: Receiver) -> None:
    """--once through the pooler delivers everything due and exits 0."""
    add_endpoint(conn, "hook", receiver.url, max_batch=5)
    outbox.publish_many(conn, [outbox.Event("order.created", {"n": n}) for n in range(23)])
    conn.commit()
    code, log = run_once(bouncer.dsn_for(dsn))
    assert code == 0, log
    assert committed(dsn, "SELECT count(*) FROM outbox.deliveries "
                     "WHERE state = 'delivered'") == [(23,)]


def test_a_failed_statement_leaves_the_pooled_connection_usable(
        dsn: str, bouncer: PgBouncer) -> None:
    """Through the pooler, a statement that fails rolls its own transaction back; the next
    statement on the connection runs, with no prepared statement left behind."""
    from dispatcher.db import Database, Health, pooled

    async def scenario() -> None:
        database = Database(bouncer.dsn_for(dsn), Health(), "test")
        try:
            for _ in range(8):  # past psycopg's prepare threshold
                assert await database.fetch("ping") == [(1,)]
            assert pooled(bouncer.dsn_for(dsn))
            with pytest.raises(psycopg.errors.InvalidTextRepresentation):
                await database.fetch("disable_endpoint", {"id": "not a number", "reason": ""})
            assert await database.fetch("ping") == [(1,)]
        finally:
            await database.close()

    asyncio.run(scenario())


def test_a_pooler_that_ignores_options_is_noticed(
        cluster: Cluster, dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """With ignore_startup_parameters = options the settings never arrive: the dispatcher
    notices and works as behind any transaction pooler."""
    add_endpoint(conn, "hook", receiver.url)
    outbox.publish_many(conn, [outbox.Event("order.created", {"n": n}) for n in range(12)])
    conn.commit()
    with PgBouncer(cluster.admin_dsn, ignore_startup_parameters="options") as lenient:
        code, log = run_once(lenient.dsn_for(dsn))
    assert code == 0, log
    assert "settings per transaction, no prepared statements" in log
    assert committed(dsn, "SELECT count(*) FROM outbox.deliveries "
                     "WHERE state = 'delivered'") == [(12,)]
