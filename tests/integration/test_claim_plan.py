"""The claim's and the completion's plans on a real PostgreSQL: their cost follows the rows
they take or finish, never their square (a nested loop that scans a CTE of the claimed rows
once per claimed row), nor every row in flight in the table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg

import outbox
from dispatcher.limits.quota import HELD_BYTES
from dispatcher.limits.rate import PACE
from dispatcher.limits.ring import RING_STEPS
from dispatcher.policy.model import ClaimRow, Record
from outbox.sql import queries
from tests.support.claiming import claim

Conn = psycopg.Connection[Any]
PER_ROW = {"locked", "sized", "grouped", "packed", "claimed"}
"""The claim's CTEs that hold a row per delivery taken."""


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _scans(conn: Conn, endpoint: int, rows: int, max_batch: int) -> dict[str, int]:
    """The claim of ``rows`` (rolled back): each per-row CTE's scans, by loops at most."""
    params = {"endpoint_ids": [endpoint], "requests": [rows // max_batch], "held": [0],
              "prefetch": [0], "rows": [rows], "floors": ["-infinity"], "ring_after": [None],
              "ring_null": [False], "ring_steps": RING_STEPS, "lease_seconds": 30,
              "horizon": 0.25, "pace": PACE, "budget": HELD_BYTES}
    with conn.transaction(force_rollback=True):
        row = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + queries["claim"],
                           params).fetchone()
    assert row is not None
    document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    top = document[0]["Plan"]
    assert top["Actual Rows"] == rows
    loops: dict[str, int] = {}
    for node in _nodes(top):
        name = node.get("CTE Name")
        if node["Node Type"] == "CTE Scan" and name in PER_ROW:
            loops[name] = max(loops.get(name, 0), int(node["Actual Loops"]))
    return loops


def test_the_claim_scans_its_claimed_rows_once_whatever_their_number(conn: Conn) -> None:
    """One endpoint, 400 due, claims of 400 single requests and of 4 batches of 100: no
    CTE of the claimed rows is scanned more than once (a join of the UPDATE's rows with
    grouped compared every pair: 10 million comparisons for 3,200 rows)."""
    for max_batch in (1, 100):
        row = conn.execute("INSERT INTO outbox.endpoints (name, url, max_batch, max_in_flight) "
                           "VALUES (%s, 'http://127.0.0.1:9/', %s, 1000) RETURNING id",
                           (f"e{max_batch}", max_batch)).fetchone()
        assert row is not None
        endpoint = int(row[0])
        outbox.publish_many(conn, [outbox.Event("t", {"n": n}) for n in range(400)])
        conn.commit()
        loops = _scans(conn, endpoint, 400, max_batch)
        assert loops, "no CTE of the claimed rows in the plan"
        assert max(loops.values()) == 1, loops


def test_a_completion_reads_its_own_rows_whatever_else_is_in_flight(conn: Conn) -> None:
    """300 of 3,000 deliveries in flight, the statistics taken before any was, results for 5:
    the complete statement's plan reads no deliveries but those 5 to lock and update them (it
    read every row in flight through the in-flight index, and scanned the locked results
    once per row read)."""
    row = conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) "
                       "VALUES ('e', 'http://127.0.0.1:9/', 1000) RETURNING id").fetchone()
    assert row is not None
    outbox.publish_many(conn, [outbox.Event("t", {"n": n}) for n in range(3000)])
    conn.commit()
    conn.execute("ANALYZE outbox.deliveries")  # statistics taken with nothing in flight
    conn.commit()
    claimed = [ClaimRow._make(found) for found in claim(conn, [int(row[0])], rows=300)]
    results = [Record(found.id, found.lease_token, "delivered", status=200).as_row()
               for found in claimed[:5]]
    with conn.transaction(force_rollback=True):
        explained = conn.execute(
            "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + queries["complete"],
            {"results": json.dumps(results), "slots": "[]", "circuits": "[]"}).fetchone()
    assert explained is not None
    document = explained[0] if not isinstance(explained[0], str) else json.loads(explained[0])
    read = [(node.get("Index Name"), (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
             * node["Actual Loops"])
            for node in _nodes(document[0]["Plan"])
            if node.get("Relation Name") == "deliveries" and "Scan" in node["Node Type"]]
    assert read, "the plan reads no deliveries"
    assert all(rows <= 5 for _, rows in read), read
    assert "deliveries_in_flight" not in {index for index, _ in read}, read
