"""The fleet's rule functions (``outbox.NAME_vN``) are inlined: every statement that calls one
is planned as if its expression were written in place, and none is ever called as a function."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from dispatcher.limits.quota import HELD_BYTES
from dispatcher.limits.rate import PACE, RATE_HORIZON
from outbox.sql import QueryName, queries

Conn = psycopg.Connection[Any]
_RULE = re.compile(r"\boutbox\.([a-z_]+_v\d+)\b")

# Each statement that calls a rule function, with parameters it can be planned with.
_STATEMENTS: dict[QueryName, dict[str, Any]] = {
    "claim": {"endpoint_ids": [1], "requests": [4], "held": [0], "prefetch": [1],
              "rows": [10], "floors": ["-infinity"], "ring_after": [None],
              "ring_null": [False], "ring_steps": 16, "lease_seconds": 30,
              "horizon": RATE_HORIZON, "pace": PACE, "budget": HELD_BYTES},
    "due_endpoints": {"after": 0, "want": 8, "budget": 16, "horizon": RATE_HORIZON,
                      "floor_ids": [], "floors": []},
    "complete": {"results": "[]", "slots": "[]", "circuits": json.dumps([[1, 1, 0, [2, 0, 1]]])},
    "park_blocked": {"endpoint_ids": [1], "budget": 10},
    "unpark_orphans": {},
    "publish": {"ids": "[]", "types": "[]", "keys": "[]", "payloads": "[]", "headers": "[]",
                "idempotency_keys": "[]", "delays": "[]", "traceparents": "[]",
                "tracestates": "[]", "tenants": "[]"},
    "admin_tenant_backlogs": {"per_endpoint": 5, "endpoint": None},
    "discard_over": {"ids": [1]},
    "database_due": {},
    "web_endpoint_circuit": {"name": "e"},
    "admin_dead_list": {"endpoint": None, "types": ["order.%"], "since": None, "until": None,
                        "failed_since": None, "limit": 10, "tenant": None, "before_at": None,
                        "before_id": None},
    "admin_events_list": {"since_id": None, "types": None, "key": None, "since": None,
                          "until": None, "limit": 10, "tenant": None, "event_ids": None},
}


def _rules(conn: Conn) -> set[str]:
    rows = conn.execute("SELECT proname FROM pg_proc WHERE pronamespace = 'outbox'::regnamespace "
                        "AND proname ~ '_v[0-9]+$'").fetchall()
    return {row[0] for row in rows}


# Kept for the previous release's statements during a rolling deploy (version 13 made
# the breaker's _v2), dropped in a later step.
_PREVIOUS_RELEASE = {"circuit_failures_v1", "circuit_touched_v1", "circuit_after_v1"}


def test_the_statements_call_only_rule_functions_the_schema_has(conn: Conn) -> None:
    """Every NAME_vN a statement names exists in the schema, and each exists for a statement
    of this release or of the previous one."""
    named = {name for text in queries.values() for name in _RULE.findall(text)}
    assert named <= _rules(conn)
    assert named | _PREVIOUS_RELEASE == _rules(conn), "a rule function no statement calls"
    assert not named & _PREVIOUS_RELEASE


@pytest.mark.parametrize("name", sorted(_STATEMENTS))
def test_each_statement_is_planned_with_its_rules_inlined(conn: Conn, name: QueryName) -> None:
    """EXPLAIN VERBOSE of the statement names no rule function: each became its expression."""
    conn.execute("INSERT INTO outbox.endpoints (name, url, rate_limit) "
                 "VALUES ('e', 'http://127.0.0.1:9/', 5)")
    text = queries[name]
    assert _RULE.search(text), f"{name} calls no rule function"
    plan = "\n".join(row[0] for row in conn.execute(
        ("EXPLAIN (VERBOSE) " + text).encode(), _STATEMENTS[name]).fetchall())
    assert not _RULE.search(plan), plan


def test_the_tenants_rounds_are_inlined_as_a_lateral_of_the_claim(conn: Conn) -> None:
    """outbox.tenant_turns_v1, set-returning, is planned as a subquery of its caller (its walk
    reads deliveries_turns in the caller's plan), never run as a function scan."""
    plan = "\n".join(row[0] for row in conn.execute(
        "EXPLAIN (VERBOSE) SELECT * FROM outbox.endpoints e CROSS JOIN LATERAL "
        "outbox.tenant_turns_v1(e.id, '-infinity', NULL, false, 4, 1, 16) t").fetchall())
    assert "Function Scan on outbox" not in plan, plan
    assert "tenant_turns_v1" not in plan, plan
    assert "deliveries_turns" in plan, plan
