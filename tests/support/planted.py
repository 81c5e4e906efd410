"""Code planted by a role that may create in ``public``: look-alikes of the built-in
operators and functions that record who ran them.

For every operator of :data:`OPERATORS` between two of :data:`TYPES` that
PostgreSQL resolves (exactly, or by casting one side: ``numeric * double
precision`` becomes ``float8 * float8``), ``plant`` makes one of the same
name taking exactly those two types; for every function named in
:data:`FUNCTIONS`, one of the same name and signature (defaults and
parameter names kept, so that ``make_interval(secs => x)`` finds it). Each
computes what the built-in computes, so that a session that runs one goes
on as if nothing happened, and first records ``current_user`` in
``public.planted_runs`` (in a read-only transaction it cannot: the call is
still counted by ``pg_stat_user_functions``, with ``track_functions``).
"""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
from psycopg import sql

TYPES = ("smallint", "integer", "bigint", "numeric", "real", "double precision", "text",
         "timestamp with time zone", "interval", "uuid", "boolean", "jsonb")
OPERATORS = ("+", "-", "*", "/", "%", "<", "<=", "=", "<>", ">=", ">", "||", "~", "~~", "->",
             "->>", "?", "@>")
FUNCTIONS = ("now", "clock_timestamp", "statement_timestamp", "random", "floor", "ceil",
             "ceiling", "round", "abs", "make_interval", "to_timestamp", "date_trunc",
             "date_part", "length", "octet_length", "lower", "upper", "substr", "left",
             "right", "md5", "pg_notify", "current_setting", "set_config", "gen_random_uuid",
             "jsonb_typeof", "jsonb_array_length", "jsonb_array_elements",
             "jsonb_array_elements_text", "jsonb_each", "jsonb_each_text", "jsonb_build_array",
             "jsonb_object_keys", "hashtext", "hashtextextended", "pg_advisory_xact_lock",
             "pg_try_advisory_xact_lock", "pg_advisory_lock", "pg_advisory_unlock",
             "pg_try_advisory_lock", "pg_current_xact_id", "txid_current", "age",
             "generate_series", "string_to_array", "array_to_string", "split_part", "btrim",
             "encode", "decode", "sha256", "pg_backend_pid", "to_char",
             "uuid_extract_timestamp", "to_regclass", "format_type", "pg_typeof",
             "pg_column_size", "pg_blocking_pids", "quote_ident", "regexp_replace",
             "strpos", "replace", "translate", "chr", "ascii", "int4", "int8", "float8",
             "numeric", "text", "timezone", "extract", "isfinite")

_RECORD = ("BEGIN INSERT INTO public.planted_runs (who, what) VALUES (current_user, {what}); "
           "EXCEPTION WHEN OTHERS THEN NULL; END;")


def prepare(conn: psycopg.Connection[Any]) -> None:
    """The record of runs, which every role may write."""
    conn.execute("CREATE TABLE public.planted_runs (who text NOT NULL, what text NOT NULL,"
                 " app text DEFAULT pg_catalog.current_setting('application_name'),"
                 " pid integer DEFAULT pg_catalog.pg_backend_pid(),"
                 " query text DEFAULT pg_catalog.current_query())")
    conn.execute("GRANT INSERT, SELECT ON public.planted_runs TO PUBLIC")


def _operators(conn: psycopg.Connection[Any]) -> list[tuple[str, str, str, str]]:
    """(operator, left, right, result type) for each pair PostgreSQL resolves."""
    found = []
    for op, left, right in itertools.product(OPERATORS, TYPES, TYPES):
        probe = sql.SQL("SELECT pg_catalog.format_type(pg_catalog.pg_typeof("
                        "NULL::{} OPERATOR(pg_catalog.{}) NULL::{})::oid, NULL)").format(
            sql.SQL(left), sql.SQL(op), sql.SQL(right))
        try:
            with conn.transaction():
                row = conn.execute(probe).fetchone()
        except psycopg.Error:
            continue
        assert row is not None
        found.append((op, left, right, str(row[0])))
    return found


def _functions(conn: psycopg.Connection[Any]) -> list[tuple[str, str, str, int, bool]]:
    """(name, arguments, result, number of arguments, set-returning) of the built-ins named
    in FUNCTIONS whose arguments and result are plain types."""
    rows = conn.execute(
        "SELECT p.proname, pg_catalog.pg_get_function_arguments(p.oid),"
        "       pg_catalog.pg_get_function_result(p.oid), p.pronargs, p.proretset"
        " FROM pg_catalog.pg_proc p"
        " WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'f'"
        "   AND p.proname = ANY(%s) AND p.provariadic = 0"
        "   AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargtypes::oid[]) t(oid)"
        "                   JOIN pg_catalog.pg_type ty ON ty.oid = t.oid"
        "                   WHERE ty.typtype = 'p')"
        "   AND (SELECT typtype FROM pg_catalog.pg_type WHERE oid = p.prorettype) <> 'p'",
        (list(FUNCTIONS),)).fetchall()
    return [(str(r[0]), str(r[1]), str(r[2]), int(r[3]), bool(r[4])) for r in rows]


def plant(conn: psycopg.Connection[Any], schema: str) -> int:
    """Plant the look-alikes in ``schema`` (which must exist); how many were made."""
    made = 0
    target = sql.Identifier(schema)
    for op, left, right, result in _operators(conn):
        what = sql.Literal(f"{schema}.{op}({left}, {right})")
        name = sql.Identifier(f"planted_op_{made}")
        conn.execute(sql.SQL(
            "CREATE FUNCTION {target}.{name}(a {left}, b {right}) RETURNS {result} "
            "LANGUAGE plpgsql AS $body$ BEGIN " + _RECORD
            + " RETURN a OPERATOR(pg_catalog.{op}) b; END $body$").format(
            target=target, name=name, left=sql.SQL(left), right=sql.SQL(right),
            result=sql.SQL(result), what=what, op=sql.SQL(op)))
        conn.execute(sql.SQL("CREATE OPERATOR {}.{} (LEFTARG = {}, RIGHTARG = {}, "
                             "FUNCTION = {}.{})").format(
            target, sql.SQL(op), sql.SQL(left), sql.SQL(right), target, name))
        made += 1
    for name, arguments, result, count, returns_set in _functions(conn):
        what = sql.Literal(f"{schema}.{name}({arguments})")
        call = sql.SQL("pg_catalog.{}({})").format(
            sql.Identifier(name), sql.SQL(", ").join(sql.SQL(f"${i}") for i in range(1, count + 1)))
        give = (sql.SQL("RETURN QUERY SELECT * FROM {};").format(call) if returns_set
                else sql.SQL("RETURN {};").format(call))
        conn.execute(sql.SQL(
            "CREATE FUNCTION {target}.{name}({arguments}) RETURNS {result} "
            "LANGUAGE plpgsql AS $body$ BEGIN " + _RECORD + " {give} END $body$").format(
            target=target, name=sql.Identifier(name), arguments=sql.SQL(arguments),
            result=sql.SQL(result), what=what, give=give))
        made += 1
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO PUBLIC").format(target))
    conn.execute(sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {} TO PUBLIC").format(target))
    return made


def runs(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """Who ran what of the planted code, in the order they did."""
    return [(str(who), str(what)) for who, what in conn.execute(
        "SELECT who, what FROM public.planted_runs").fetchall()]


def details(conn: psycopg.Connection[Any]) -> str:
    """Each planted run with the session that made it (application_name, backend pid) and
    the statement it was running, a line each: what a failing test prints."""
    return "\n".join(f"{who} ran {what} in {app!r} (pid {pid}): {query}" for who, what, app, pid,
                     query in conn.execute("SELECT who, what, app, pid, query"
                                           " FROM public.planted_runs").fetchall())


def calls(conn: psycopg.Connection[Any], schemas: list[str]) -> int:
    """Calls of the planted functions counted by the statistics (track_functions = pl)."""
    conn.execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
    row = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_catalog.pg_stat_user_functions"
                       " WHERE schemaname = ANY(%s)", (schemas,)).fetchone()
    assert row is not None
    return int(row[0])
