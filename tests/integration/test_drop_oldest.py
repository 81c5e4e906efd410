"""--when-full drop-oldest: publish() never refuses for such an endpoint's bounds, and the
maintainer's discard (discard_over) brings its backlog back to the bound, oldest first,
never a delivery in flight, a tenant's only from its own, each delivery once."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import outbox
from dispatcher.config import DispatcherConfig
from dispatcher.db import Database, Health
from dispatcher.endpoint_view import EndpointView
from dispatcher.leases import Leases
from dispatcher.maintenance import Maintenance
from dispatcher.observe.metrics import Metrics
from outbox import endpoints
from outbox.sql import queries
from tests.support.claiming import ID, claim

Conn = psycopg.Connection[Any]
URL = "http://127.0.0.1:9/"


def _add(conn: Conn, name: str, events: tuple[str, ...] = ("*",), **options: Any) -> int:
    endpoints.add(conn, name, url=URL, events=events, **options)
    row = conn.execute("SELECT id FROM outbox.endpoints WHERE name = %s AND removed_at IS NULL",
                       (name,)).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def _publish(conn: Conn, count: int, type_: str = "order.created",
             tenant: str | None = None) -> None:
    outbox.publish_many(conn, [outbox.Event(type_, {"n": n}, tenant=tenant)
                               for n in range(count)])
    conn.commit()


def _discard(conn: Conn, ids: list[int]) -> list[tuple[int, str, int]]:
    rows = conn.execute(queries["discard_over"], {"ids": ids}).fetchall()
    conn.commit()
    return [(int(e), str(reason), int(n)) for e, reason, n in rows]


def _seqs(conn: Conn, endpoint_id: int, state: str, tenant: str | None = None) -> list[int]:
    rows = conn.execute(
        "SELECT seq FROM outbox.deliveries WHERE endpoint_id = %s AND state = %s "
        "AND (%s::text IS NULL OR tenant = %s) ORDER BY seq",
        (endpoint_id, state, tenant, tenant)).fetchall()
    conn.commit()
    return [int(r[0]) for r in rows]


def _held(conn: Conn, endpoint_id: int) -> int:
    row = conn.execute("SELECT held FROM outbox.backlog_v1(%s)", (endpoint_id,)).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def test_publish_never_refuses_for_a_drop_oldest_endpoints_bounds(conn: Conn) -> None:
    """Past --max-pending and --max-pending-per-tenant, publish() to a drop-oldest endpoint
    writes every event (counted); a refusing endpoint beside it still raises BacklogFull."""
    drops = _add(conn, "drops", ("order.*",), max_pending=3, max_pending_per_tenant=2,
                 when_full="drop-oldest")
    _add(conn, "refuses", ("invoice.*",), max_pending=3)
    for _ in range(4):
        _publish(conn, 3, tenant="acme")
    assert _held(conn, drops) == 12
    _publish(conn, 3, "invoice.sent")
    with pytest.raises(outbox.BacklogFull) as refused:
        outbox.publish(conn, "invoice.sent", {})
    assert refused.value.endpoint == "refuses"


def test_the_newest_are_kept_up_to_the_bound_and_nothing_in_flight_goes(conn: Conn) -> None:
    """12 undelivered at a bound of 5, 3 of them in flight: the 7 oldest pending go, the 2
    newest stay, the 3 in flight stay in flight; the counter says 5; the other endpoint of the
    same events keeps all 12; a second round finds nothing to do."""
    drops = _add(conn, "drops", max_pending=5, when_full="drop-oldest")
    other = _add(conn, "other")
    _publish(conn, 12)
    flying = claim(conn, [drops], rows=3, requests=3)
    assert len(flying) == 3
    assert _discard(conn, [drops, other]) == [(drops, "backlog-full", 7)]
    seqs = _seqs(conn, other, "pending")
    assert _seqs(conn, drops, "in_flight") == seqs[:3]
    assert _seqs(conn, drops, "discarded") == seqs[3:10]
    assert _seqs(conn, drops, "pending") == seqs[10:]
    assert len(seqs) == 12
    assert _held(conn, drops) == 5
    row = conn.execute("SELECT last_error, finished_at IS NOT NULL, lease_token IS NULL "
                       "FROM outbox.deliveries WHERE state = 'discarded' LIMIT 1").fetchone()
    assert row == ("discarded: the endpoint held more than max_pending (5) undelivered "
                   "deliveries (when_full = drop-oldest)", True, True)
    assert _discard(conn, [drops]) == []
    assert [r[ID] for r in flying] == [r[0] for r in conn.execute(
        "SELECT id FROM outbox.deliveries WHERE state = 'in_flight' ORDER BY id")]


def test_a_tenant_past_its_bound_loses_only_its_own_oldest(conn: Conn) -> None:
    """--max-pending-per-tenant 3: acme's 6 keep their newest 3 (one of them in flight), the
    other tenant's and those without a tenant are all kept, whatever their age."""
    drops = _add(conn, "drops", max_pending=100, max_pending_per_tenant=3,
                 when_full="drop-oldest")
    _publish(conn, 2, tenant="globex")
    _publish(conn, 4, tenant="acme")
    _publish(conn, 2)
    _publish(conn, 2, tenant="acme")
    acme = _seqs(conn, drops, "pending", "acme")
    conn.execute("UPDATE outbox.deliveries SET state = 'in_flight', "
                 "lease_expires_at = now() + interval '1 minute' WHERE seq = %s", (acme[-1],))
    conn.commit()
    assert _discard(conn, [drops]) == [(drops, "backlog-full", 3)]
    assert _seqs(conn, drops, "discarded") == acme[:3]
    assert _seqs(conn, drops, "pending", "acme") == acme[3:5]
    assert len(_seqs(conn, drops, "pending")) == 6  # acme's 2, globex's 2, no tenant's 2
    row = conn.execute("SELECT last_error FROM outbox.deliveries WHERE state = 'discarded' "
                       "LIMIT 1").fetchone()
    assert row is not None
    assert "max_pending_per_tenant (3)" in row[0]


def test_the_tenants_bound_is_applied_before_the_endpoints(conn: Conn) -> None:
    """A tenant past its bound gives up its own first; the endpoint's bound then takes only
    what is still too much, so the endpoint keeps exactly --max-pending."""
    drops = _add(conn, "drops", max_pending=10, max_pending_per_tenant=5,
                 when_full="drop-oldest")
    _publish(conn, 8, tenant="acme")
    _publish(conn, 7, tenant="globex")
    assert _discard(conn, [drops]) == [(drops, "backlog-full", 5)]
    assert len(_seqs(conn, drops, "pending", "acme")) == 5
    assert len(_seqs(conn, drops, "pending", "globex")) == 5


def _together(dsn: str, endpoint_id: int, sessions: int) -> list[int]:
    """discard_over run by ``sessions`` sessions at once; what each reports it discarded."""
    start = threading.Barrier(sessions)
    counts: list[int] = []

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True) as own:
            start.wait()
            rows = own.execute(queries["discard_over"], {"ids": [endpoint_id]}).fetchall()
            counts.append(sum(int(r[2]) for r in rows))

    threads = [threading.Thread(target=run) for _ in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts


def test_two_maintainers_at_once_discard_each_delivery_once(dsn: str, conn: Conn) -> None:
    """Four sessions run the discard together, round after round while events keep coming:
    the discarded rows are exactly what the rounds report, and the bound holds exactly."""
    drops = _add(conn, "drops", max_pending=10, when_full="drop-oldest")
    reported = 0
    for _ in range(5):
        _publish(conn, 60)
        reported += sum(_together(dsn, drops, 4))
        assert len(_seqs(conn, drops, "pending")) == 10
    assert reported == len(_seqs(conn, drops, "discarded")) == 290
    assert _held(conn, drops) == 10


def test_an_endpoint_within_its_bounds_is_left_alone(conn: Conn) -> None:
    """At the bound (not past it), or with a refusing policy, nothing is discarded."""
    drops = _add(conn, "drops", max_pending=5, when_full="drop-oldest")
    refuses = _add(conn, "refuses", max_pending=5)
    _publish(conn, 5)
    assert _discard(conn, [drops, refuses]) == []
    assert _seqs(conn, drops, "discarded") == []


def test_the_maintainer_runs_no_statement_while_no_endpoint_has_a_policy(
        dsn: str, conn: Conn) -> None:
    """Without a policy the discard and the dead letters' expiry run no statement; once an
    endpoint drops its oldest, the discard runs and counts in outbox_dropped_total."""
    _add(conn, "plain", max_pending=5)
    _publish(conn, 5)
    metrics = Metrics()

    async def scenario() -> tuple[list[str], list[str]]:
        db = Database(dsn, Health(), "maintenance")
        upkeep = Maintenance(DispatcherConfig(dsn=dsn), db=db, endpoints=EndpointView({}),
                             metrics=metrics, leases=Leases(30, lambda: 0.0),
                             wake=lambda: None, endpoints_changed=asyncio.Event())
        ran: list[str] = []
        fetch = db.fetch

        async def recorded(name: Any, params: Any = None) -> Any:
            ran.append(str(name))
            return await fetch(name, params)

        db.fetch = recorded  # type: ignore[method-assign]
        try:
            await upkeep.refresh_endpoints()
            ran.clear()
            await upkeep.discard()
            await upkeep.expire_dead()
            idle = list(ran)
            await asyncio.to_thread(_policy, dsn)
            await upkeep.refresh_endpoints()
            ran.clear()
            await upkeep.discard()
            return idle, list(ran)
        finally:
            await db.close()

    idle, busy = asyncio.run(scenario())
    assert idle == []
    assert busy == ["discard_over"]
    assert _dropped(metrics, "plain") == 4


def _policy(dsn: str) -> None:
    with psycopg.connect(dsn) as other:
        endpoints.update(other, "plain", max_pending=1, when_full="drop-oldest")


def _dropped(metrics: Metrics, endpoint: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if (sample.name == "outbox_dropped_total"
                    and sample.labels == {"endpoint": endpoint, "reason": "backlog-full"}):
                return float(sample.value)
    return 0.0
