"""Every statement, and every rule function whatever its caller's search_path, meets only
pg_catalog's operators: none would let a look-alike planted elsewhere stand in for one.

A look-alike is an operator of a schema ``probe`` for a pair of types that
PostgreSQL resolves without an exact built-in match (``numeric * double
precision``), or, for the rule functions, for every pair it resolves at all;
its function is inlined SQL around ``probe.tag_N()``, so that a plan that
uses one names it in ``EXPLAIN (VERBOSE)``.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dispatcher.db import positional
from outbox.sql import queries
from tests.support.planted import OPERATORS, TYPES

Conn = psycopg.Connection[Any]
_MORE = ("text[]", "bigint[]", "integer[]", "timestamp with time zone[]", "json", "xid", "oid")
_TAG = re.compile(r"\btag_(\d+)\(")


def _plant(conn: Conn, *, exact_too: bool) -> dict[str, str]:
    """The look-alikes in schema probe; tag number -> 'left op right'."""
    conn.execute("CREATE SCHEMA probe")
    tags: dict[str, str] = {}
    types = TYPES + _MORE
    for op, left, right in itertools.product(OPERATORS, types, types):
        args = {"op": sql.SQL(op), "l": sql.SQL(left), "r": sql.SQL(right)}
        if not exact_too and conn.execute(sql.SQL(
                "SELECT count(*) FROM pg_catalog.pg_operator WHERE oprname = {op_name} "
                "AND oprleft = {l_name}::regtype AND oprright = {r_name}::regtype").format(
                op_name=sql.Literal(op), l_name=sql.Literal(left), r_name=sql.Literal(right)),
                ).fetchone() != (0,):
            continue
        try:
            with conn.transaction():
                row = conn.execute(sql.SQL(
                    "SELECT pg_catalog.format_type(pg_catalog.pg_typeof("
                    "NULL::{l} OPERATOR(pg_catalog.{op}) NULL::{r})::oid, NULL)").format(**args),
                ).fetchone()
        except psycopg.Error:
            continue
        assert row is not None
        number = str(len(tags) + 1)
        tags[number] = f"{left} {op} {right}"
        names = {"tag": sql.Identifier(f"tag_{number}"), "mark": sql.Identifier(f"mark_{number}"),
                 "res": sql.SQL(str(row[0])), **args}
        conn.execute(sql.SQL("CREATE FUNCTION probe.{tag}(a {res}) RETURNS {res} "
                             "LANGUAGE plpgsql AS 'BEGIN RETURN a; END'").format(**names))
        conn.execute(sql.SQL("CREATE FUNCTION probe.{mark}(a {l}, b {r}) RETURNS {res} "
                             "LANGUAGE sql AS 'SELECT probe.{tag}(a OPERATOR(pg_catalog.{op}) b)'"
                             ).format(**names))
        conn.execute(sql.SQL("CREATE OPERATOR probe.{op} (LEFTARG = {l}, RIGHTARG = {r}, "
                             "FUNCTION = probe.{mark})").format(**names))
    return tags


def _met(plan: str, tags: dict[str, str]) -> list[str]:
    return sorted(tags[number] for number in set(_TAG.findall(plan)))


def test_no_statement_meets_an_operator_without_an_exact_match(conn: Conn) -> None:
    """EXPLAIN (VERBOSE, GENERIC_PLAN) of every statement, on the path pg_catalog, probe,
    uses no look-alike: every mixed-type operation is cast to one type."""
    if conn.info.server_version < 160000:
        pytest.skip("EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16")
    conn.autocommit = True
    tags = _plant(conn, exact_too=False)
    assert len(tags) > 300
    conn.execute("SET search_path = pg_catalog, probe")
    met: dict[str, list[str]] = {}
    for name in sorted(queries):
        query, _ = positional(name)
        if name.startswith("demo_") or not re.match(
                rb"(\s*--[^\n]*\n)*\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", query, re.I):
            continue
        plan = "\n".join(row[0] for row in conn.execute(
            b"EXPLAIN (VERBOSE, GENERIC_PLAN) " + query).fetchall())
        if _met(plan, tags):
            met[name] = _met(plan, tags)
    assert met == {}


_SETS = ("key_", "tenant_", "backlog_")  # set-returning: called in FROM

_CALLS: dict[str, str] = {
    "circuit_probe_due_v1": "'open', now(), 1.5::float8, now()",
    "circuit_failures_v1": "1, 2, false",
    "circuit_touched_v1": "'closed', 1, 3, 1",
    "circuit_after_v1": "'half-open', 1, 3, 0, true",
    "circuit_window_v2": "'{1,2}'::integer[], now(), 30::float8",
    "circuit_sum_v2": "'{1,2}'::integer[]",
    "circuit_add_v2": "'{1,2}'::integer[], '{3}'::integer[], 1",
    "circuit_window_at_v2": "30::float8",
    "circuit_touched_v2": "'closed', 10, '{0,1}'::integer[], 0",
    "circuit_after_v2": "'closed', 10, 50::float8, 20, 12, 3, 1",
    "rate_turns_v1": "now(), 2.5::float8, 0.5::float8, 4",
    "rate_turn_near_v1": "now(), 0.5::float8",
    "rate_next_turn_v1": "now(), 3, 2.5::float8",
    "slot_free_v1": "now()",
    "key_blockers_v1": "1::bigint, 'k', 't', 9::bigint",
    "tenant_turns_v1": "1::bigint, now(), 't', false, 4, 2, 16",
    "backlog_v1": "1::bigint",
    "tenant_backlog_v1": "1::bigint, 't', 5::bigint",
    "backlog_over_v1": "1::bigint, 10::bigint, 5::bigint",
    "key_next_v1": "1::bigint, 'k', 't', 9::bigint",
    "event_matches_v1": "'a.b', now(), 't', '{a.%}'::text[], now(), now(), 't'",
}


def test_the_rule_functions_meet_only_pg_catalog_on_any_path(conn: Conn) -> None:
    """Called with look-alikes of every operator first on the path (probe, pg_catalog), each
    rule function is inlined and uses none of them."""
    conn.autocommit = True
    tags = _plant(conn, exact_too=True)
    rules = {str(row[0]) for row in conn.execute(
        "SELECT proname FROM pg_catalog.pg_proc WHERE pronamespace = 'outbox'::regnamespace "
        "AND proname ~ '_v[0-9]+$'").fetchall()}
    assert rules == set(_CALLS)
    conn.execute("SET search_path = probe, pg_catalog")
    for rule, args in _CALLS.items():
        call = f"outbox.{rule}({args})"
        query = f"EXPLAIN (VERBOSE) SELECT {'* FROM ' + call if rule.startswith(_SETS) else call}"
        plan = "\n".join(row[0] for row in conn.execute(query.encode()).fetchall())
        assert f"{rule}(" not in plan, plan  # inlined
        assert _met(plan, tags) == [], (rule, plan)
