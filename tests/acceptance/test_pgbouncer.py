"""Behind PgBouncer in transaction mode: publish() and the dispatcher as they are.

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
from psycopg import sql

import outbox
from outbox.testing import Receiver
from tests.conftest import Cluster
from tests.support import planted
from tests.support.cli import run_outbox
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
from tests.support.web import web_client

pytestmark = pytest.mark.skipif(find_pgbouncer() is None, reason="pgbouncer is not installed "
                                "(Debian: apt-get install pgbouncer)")

LISTEN_WARNING = "LISTEN does not work"


@pytest.fixture(scope="module")
def bouncer(cluster: Cluster) -> Iterator[PgBouncer]:
    with PgBouncer(cluster.admin_dsn, pool_size=4) as running:
        yield running


def test_publish_through_the_pooler(dsn: str, bouncer: PgBouncer) -> None:
    """publish(), publish_many() and idempotency keys work through PgBouncer on a connection
    opened with psycopg's defaults (which prepare a statement run five times): publish
    notices the pooler and prepares nothing."""
    with psycopg.connect(dsn) as direct:
        add_endpoint(direct, "hook", "http://127.0.0.1:9/")
    ids = []
    with psycopg.connect(bouncer.dsn_for(dsn)) as conn:
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


def test_nothing_planted_runs_through_the_pooler(dsn: str, bouncer: PgBouncer,
                                                conn: psycopg.Connection[Any],
                                                receiver: Receiver) -> None:
    """Through the pooler, where no startup setting reaches the server, the dispatcher's
    transactions pin their search_path (SET LOCAL): look-alikes planted in public, put
    before pg_catalog on the database's path, never run; a plain session runs them."""
    add_endpoint(conn, "hook", receiver.url, max_batch=2, rate_limit=1000)
    outbox.publish_many(conn, [outbox.Event("order.created", {"n": n}, key=f"k{n % 2}")
                               for n in range(7)])
    conn.commit()
    conn.autocommit = True
    planted.prepare(conn)
    planted.plant(conn, "public")
    name = conn.info.dbname
    conn.execute(sql.SQL("ALTER DATABASE {} SET search_path = public, pg_catalog").format(
        sql.Identifier(name)))
    code, log = run_once(bouncer.dsn_for(dsn), "--retention", "1s")
    assert code == 0, log
    ran = planted.runs(conn)
    assert ran == [], f"planted code ran:\n{planted.details(conn)}\n{log}"  # and the log
    # (this session began before the path changed: it meets nothing planted either)
    assert conn.execute("SELECT count(*) FROM outbox.deliveries "
                        "WHERE state = 'delivered'").fetchone() == (7,)
    with psycopg.connect(dsn, autocommit=True) as plain:  # the control
        plain.execute("SELECT 2::numeric * 1.5::float8")
    assert planted.runs(conn) != []


def test_statements_sharing_a_pooled_connection_each_keep_their_path(
        dsn: str, bouncer: PgBouncer, conn: psycopg.Connection[Any]) -> None:
    """Tasks that share one connection through the pooler (the once pass's count beside the
    maintainer's lease, say) run their statements one whole transaction after another:
    none runs between another's SET LOCAL and COMMIT, outside any pinned transaction."""
    from dispatcher.db import Database, Health

    conn.autocommit = True
    planted.prepare(conn)
    planted.plant(conn, "public")
    conn.execute(sql.SQL("ALTER DATABASE {} SET search_path = public, pg_catalog").format(
        sql.Identifier(conn.info.dbname)))
    me = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

    async def scenario() -> list[Any]:
        database = Database(bouncer.dsn_for(dsn), Health(), "test")
        try:
            await database.fetch("ping")  # connected: the tasks below share its connection
            return await asyncio.gather(*(database.fetch(name, params) for _ in range(10)
                                          for name, params in (("pending_count", {}),
                                                               ("maintainer_resign", {"me": me}),
                                                               ("heartbeat_sweep", None))),
                                        return_exceptions=True)
        finally:
            await database.close()

    answers = asyncio.run(scenario())
    assert planted.runs(conn) == [], planted.details(conn)
    assert [a for a in answers if isinstance(a, BaseException)] == []


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


def test_the_command_refuses_a_pooler_that_drops_its_settings(
        cluster: Cluster, dsn: str, conn: psycopg.Connection[Any]) -> None:
    """With ignore_startup_parameters = options the command's pinned search_path never
    arrives: every command exits 1 saying so, before any statement of its own (the
    endpoint is not added); directly, the same command works."""
    with PgBouncer(cluster.admin_dsn, ignore_startup_parameters="options") as lenient:
        for args in (("status",), ("endpoints", "add", "hook", "--url", "http://127.0.0.1:9/"),
                     ("migrate", "--check")):
            result = run_outbox(lenient.dsn_for(dsn), *args)
            assert result.returncode == 1, (args, result.stdout, result.stderr)
            assert "did not apply this connection's settings" in result.stderr
            assert "ignore_startup_parameters" in result.stderr
            assert "Traceback" not in result.stderr
    assert committed(dsn, "SELECT count(*) FROM outbox.endpoints") == [(0,)]
    assert run_outbox(dsn, "status").returncode == 0


def test_the_web_view_refuses_a_pooler_that_drops_its_settings(
        cluster: Cluster, dsn: str) -> None:
    """Through a pooler that drops startup parameters the view's readers would run on the
    database's own path, writable and without a timeout: every page says why it cannot
    read (503) and runs nothing; directly, the same page is served."""
    with PgBouncer(cluster.admin_dsn, ignore_startup_parameters="options") as lenient, \
            web_client(lenient.dsn_for(dsn)) as client:
        for path in ("/", "/dead", "/tenants"):
            page = client.get(path)
            assert page.status_code == 503, (path, page.text)
            assert "ignore_startup_parameters" in page.text
    with web_client(dsn) as client:
        assert client.get("/").status_code == 200


def test_apublish_through_the_pooler_with_psycopgs_defaults(dsn: str,
                                                           bouncer: PgBouncer) -> None:
    """apublish() on a default AsyncConnection through PgBouncer, well past the threshold."""
    with psycopg.connect(dsn) as direct:
        add_endpoint(direct, "hook", "http://127.0.0.1:9/")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(bouncer.dsn_for(dsn)) as conn:
            for n in range(12):
                await outbox.apublish(conn, "order.created", {"n": n})
                await conn.commit()

    asyncio.run(main())
    assert committed(dsn, "SELECT count(*) FROM outbox.events") == [(12,)]


def test_publish_survives_its_transactions_moving_between_server_connections(
        dsn: str, bouncer: PgBouncer) -> None:
    """Two producers interleaved so that each transaction of the first lands on another
    server connection than its last: psycopg's defaults, publish well past the threshold."""
    with psycopg.connect(dsn) as direct:
        add_endpoint(direct, "hook", "http://127.0.0.1:9/")
    with psycopg.connect(bouncer.dsn_for(dsn)) as first, \
            psycopg.connect(bouncer.dsn_for(dsn)) as second:
        for n in range(10):
            outbox.publish(first, "order.created", {"n": n})
            first.commit()  # its server connection is free again: the second takes it
            outbox.publish(second, "order.created", {"n": n})
            outbox.publish(first, "order.created", {"n": n})  # so this one gets another
            first.commit()
            second.commit()
    assert committed(dsn, "SELECT count(*) FROM outbox.events") == [(30,)]
