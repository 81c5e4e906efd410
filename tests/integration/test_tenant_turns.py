"""Fair turns between the tenants of one endpoint, in the claim statement itself (real
PostgreSQL): the slots a claim fills are dealt one per tenant with due work in a ring, then
a second each, and so on; a batch holds one tenant's events; deliveries without a tenant are
one tenant; the walk is bounded and goes on from where the last claim left."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg

import outbox
from dispatcher.limits.ring import RING_STEPS, Ring
from dispatcher.policy.model import ClaimRow
from outbox.sql import queries
from tests.support.claiming import claim, finish

Conn = psycopg.Connection[Any]


def _endpoint(conn: Conn, *, max_batch: int = 1) -> int:
    row = conn.execute("INSERT INTO outbox.endpoints (name, url, max_batch, max_in_flight) "
                       "VALUES ('e', 'http://127.0.0.1:9/', %s, 1000) RETURNING id",
                       (max_batch,)).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def _publish(conn: Conn, tenant: str | None, count: int) -> None:
    outbox.publish_many(conn, [outbox.Event("t", {"n": n}, tenant=tenant) for n in range(count)])
    conn.commit()


def _groups(rows: list[tuple[Any, ...]]) -> list[tuple[int, str | None]]:
    """Each request of the claim (in group order), with its tenant."""
    seen: dict[int, str | None] = {}
    for row in map(ClaimRow._make, rows):
        seen.setdefault(row.grp, row.tenant)
    return [(grp, seen[grp]) for grp in sorted(seen)]


def test_a_tenant_with_a_few_due_is_dealt_turns_between_a_backlog(conn: Conn) -> None:
    """A has 200 due, B 3 (published after): B's three go in the claim's first six requests,
    and A takes every slot B cannot use."""
    endpoint = _endpoint(conn)
    _publish(conn, "a", 200)
    _publish(conn, "b", 3)
    groups = _groups(claim(conn, [endpoint], rows=10))
    tenants = [tenant for _, tenant in groups]
    assert len(tenants) == 10
    assert tenants[:6] == ["a", "b", "a", "b", "a", "b"]
    assert tenants[6:] == ["a"] * 4


def test_more_tenants_than_slots_take_turns_across_claims(conn: Conn) -> None:
    """Twelve tenants with due work, claims of four requests: every tenant once in three
    claims, none twice before each has had its turn."""
    endpoint = _endpoint(conn)
    for n in range(12):
        _publish(conn, f"t{n:02}", 5)
    ring = Ring()
    served: list[str | None] = []
    for _ in range(6):
        cursor = ring.for_claim([endpoint])
        rows = claim(conn, [endpoint], rows=4, ring_after=cursor["ring_after"][0],
                     ring_null=cursor["ring_null"][0])
        ring.claimed(map(ClaimRow._make, rows))
        served += [tenant for _, tenant in _groups(rows)]
    assert served[:12] == [f"t{n:02}" for n in range(12)]
    assert served[12:] == served[:12]


def test_deliveries_without_a_tenant_are_one_tenant(conn: Conn) -> None:
    """Untenanted deliveries take their turns beside the named tenants, after them in the
    ring; with nothing else due they take every slot, as before."""
    endpoint = _endpoint(conn)
    _publish(conn, None, 50)
    _publish(conn, "a", 50)
    tenants = [tenant for _, tenant in _groups(claim(conn, [endpoint], rows=6))]
    assert tenants == ["a", None] * 3
    conn.execute("DELETE FROM outbox.deliveries WHERE tenant IS NOT NULL")
    conn.commit()
    tenants = [tenant for _, tenant in _groups(claim(conn, [endpoint], rows=6))]
    assert tenants == [None] * 6


def test_a_batch_holds_one_tenants_events(conn: Conn) -> None:
    """With --max-batch 5, each request's events are one tenant's, and the tenants alternate."""
    endpoint = _endpoint(conn, max_batch=5)
    _publish(conn, "a", 30)
    _publish(conn, "b", 30)
    rows = [ClaimRow._make(row) for row in claim(conn, [endpoint], rows=20)]
    by_group: dict[int, set[str | None]] = {}
    for row in rows:
        by_group.setdefault(row.grp, set()).add(row.tenant)
    assert all(len(tenants) == 1 for tenants in by_group.values())
    assert [by_group[grp].pop() for grp in sorted(by_group)] == ["a", "b", "a", "b"]
    assert Counter(row.grp for row in rows) == {0: 5, 1: 5, 2: 5, 3: 5}


def test_a_walk_cut_short_by_its_steps_still_claims_and_goes_on(conn: Conn) -> None:
    """More tenants whose rows all wait (retries backing off) than one walk may look at,
    before the one with due work: the claim still takes due work (work-conserving), and the
    walks after it go on past those tenants."""
    endpoint = _endpoint(conn)
    waiting = RING_STEPS + 20
    outbox.publish_many(conn, [outbox.Event("t", {}, tenant=f"a{n:04}", delay=3600)
                               for n in range(waiting)])
    _publish(conn, "z", 3)
    rows = claim(conn, [endpoint], rows=1)
    assert [tenant for _, tenant in _groups(rows)] == ["z"]
    for row in rows:
        finish(conn, row)
    ring = Ring()
    cursor = {"ring_after": ["a0000"], "ring_null": [False]}
    rows = claim(conn, [endpoint], rows=1, ring_after=cursor["ring_after"][0])
    ring.claimed(map(ClaimRow._make, rows))
    assert [tenant for _, tenant in _groups(rows)] == ["z"]


def test_two_dispatchers_each_deal_turns(conn: Conn, dsn: str) -> None:
    """Two claimers, each with its own cursor, claiming one slot at a time in alternation:
    B's due events are never behind more than one request of A from either."""
    endpoint = _endpoint(conn)
    _publish(conn, "a", 100)
    _publish(conn, "b", 4)
    with psycopg.connect(dsn) as other:
        cursors = [Ring(), Ring()]
        served: list[str | None] = []
        for n in range(8):
            connection, ring = (conn, other)[n % 2], cursors[n % 2]
            cursor = ring.for_claim([endpoint])
            rows = claim(connection, [endpoint], rows=1, ring_after=cursor["ring_after"][0],
                         ring_null=cursor["ring_null"][0])
            ring.claimed(map(ClaimRow._make, rows))
            served += [tenant for _, tenant in _groups(rows)]
    assert served.count("b") == 4
    first_b = [index for index, tenant in enumerate(served) if tenant == "b"]
    assert all(later - earlier <= 3 for earlier, later in zip([-1, *first_b], first_b,
                                                                strict=False))


def test_the_gauges_count_tenants_with_due_work_and_the_largest_backlog(conn: Conn) -> None:
    """The backlog query: tenants with due rows (untenanted ones count as one; a tenant whose
    rows all wait is not due) and the largest tenant's pending rows."""
    endpoint = _endpoint(conn)
    _publish(conn, "a", 7)
    _publish(conn, "b", 2)
    _publish(conn, None, 3)
    outbox.publish(conn, "t", {}, tenant="later", delay=3600)
    conn.commit()
    [row] = conn.execute(queries["backlog"]).fetchall()
    name, pending, _oldest, _circuit, _bound, tenants_due, largest, enabled, *_info = row
    assert (name, pending, tenants_due, largest, enabled) == ("e", 13, 3, 7, True)
    assert endpoint


def test_a_tenant_with_requests_in_flight_anywhere_waits_its_rounds(conn: Conn,
                                                                     dsn: str) -> None:
    """Another dispatcher holds four of A's requests: A is four rounds ahead, so this claim
    deals B (and C) their first requests before A's next, whatever the cursor says."""
    endpoint = _endpoint(conn)
    _publish(conn, "a", 50)
    with psycopg.connect(dsn) as other:
        held = claim(other, [endpoint], rows=4)
    assert {tenant for _, tenant in _groups(held)} == {"a"}
    _publish(conn, "b", 3)
    _publish(conn, "c", 1)
    tenants = [tenant for _, tenant in _groups(claim(conn, [endpoint], rows=8))]
    assert tenants == ["b", "c", "b", "b", "a", "a", "a", "a"]


def test_a_tenant_alone_takes_every_request_and_a_second_one_brings_the_rounds_back(
        conn: Conn, dsn: str) -> None:
    """A alone (its rows in flight elsewhere too, and the deliveries without a tenant alone
    on another endpoint): a claim takes its due rows oldest first, batches of max_batch, as
    many requests as asked; once B has a row pending, the next claim deals B a round."""
    endpoint = _endpoint(conn, max_batch=2)
    _publish(conn, "a", 30)
    with psycopg.connect(dsn) as other:
        claim(other, [endpoint], rows=4)
    rows = [ClaimRow._make(row) for row in claim(conn, [endpoint], rows=10)]
    assert [row.grp for row in rows] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert {row.tenant for row in rows} == {"a"}
    ids = [row.id for row in rows]
    assert ids == sorted(ids)  # published in one batch: due in id order
    _publish(conn, "b", 2)
    assert _groups(claim(conn, [endpoint], rows=6))[:2] == [(0, "b"), (1, "a")]
    untenanted = conn.execute("INSERT INTO outbox.endpoints (name, url, max_batch, "
                              "max_in_flight) VALUES ('u', 'http://127.0.0.1:9/', 1, 1000) "
                              "RETURNING id").fetchone()
    assert untenanted is not None
    outbox.publish_many(conn, [outbox.Event("t", {"n": n}) for n in range(5)])
    conn.commit()
    rows = [ClaimRow._make(row) for row in claim(conn, [int(untenanted[0])], rows=5)]
    assert [(row.grp, row.tenant) for row in rows] == [(n, None) for n in range(5)]


def test_turns_go_within_the_rate_limit_and_the_circuits_probe(conn: Conn) -> None:
    """A rate-limited endpoint deals its turns of the claim's horizon between the tenants;
    an open circuit's one probe goes to one tenant."""
    endpoint = _endpoint(conn)
    conn.execute("UPDATE outbox.endpoints SET rate_limit = 20 WHERE id = %s", (endpoint,))
    conn.commit()
    _publish(conn, "a", 50)
    _publish(conn, "b", 50)
    tenants = [tenant for _, tenant in _groups(claim(conn, [endpoint], rows=8, horizon=0.2))]
    assert 2 <= len(tenants) < 8  # the turns of 0.2 s at 20/s, not the 8 asked
    assert tenants[:2] == ["a", "b"]
    conn.execute("UPDATE outbox.endpoints SET rate_limit = NULL WHERE id = %s", (endpoint,))
    conn.execute("UPDATE outbox.endpoint_state SET circuit = 'open', "
                 "opened_at = now() - interval '1 hour' WHERE endpoint_id = %s", (endpoint,))
    conn.commit()
    probe = [ClaimRow._make(row) for row in claim(conn, [endpoint], rows=8)]
    assert len(probe) == 1
    assert probe[0].probe
