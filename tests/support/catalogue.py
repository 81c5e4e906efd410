"""The whole catalogue of the ``outbox`` schema, as plain data two databases can be compared on.

Tables with their options, columns (type, default, nullability, identity,
collation), constraints, indexes, triggers, functions (whole definitions),
sequences and every privilege. Columns are keyed by name, not position: a
column added by ALTER TABLE goes last, where schema.sql may list it in the
middle; nothing of ours depends on column order (no ``SELECT *``, every
INSERT names its columns).
"""

from __future__ import annotations

from typing import Any

import psycopg

_QUERIES: dict[str, str] = {
    "schema": """
        SELECT n.nspname, pg_get_userbyid(n.nspowner), n.nspacl::text[]
        FROM pg_namespace n WHERE n.nspname = 'outbox'""",
    "tables": """
        SELECT c.relname, c.relkind, c.relpersistence, c.reloptions, c.relacl::text[],
               pg_get_userbyid(c.relowner)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'outbox' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')""",
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
               a.attcollation::regcollation::text, a.attacl::text[]
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'outbox' AND a.attnum > 0 AND NOT a.attisdropped
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f')""",
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid), k.convalidated
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'outbox'""",
    "indexes": """
        SELECT t.relname, i.relname, pg_get_indexdef(x.indexrelid), x.indisvalid,
               x.indisunique, x.indisprimary
        FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'outbox'""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'outbox' AND NOT t.tgisinternal""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid),
               p.proacl::text[], pg_get_userbyid(p.proowner)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'outbox'""",
    "sequences": """
        SELECT c.relname, s.seqtypid::regtype::text, s.seqstart, s.seqincrement, s.seqmax,
               s.seqmin, s.seqcache, s.seqcycle
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'outbox'""",
    "types": """
        SELECT t.typname, t.typtype FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'outbox' AND t.typtype NOT IN ('c', 'b')""",
    "default_privileges": """
        SELECT d.defaclobjtype, d.defaclacl::text[] FROM pg_default_acl d
        JOIN pg_namespace n ON n.oid = d.defaclnamespace WHERE n.nspname = 'outbox'""",
}


def catalogue(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every kind of object of the ``outbox`` schema, each as a sorted list of rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {kind: sorted((tuple(row) for row in conn.execute(query.encode()).fetchall()),
                             key=repr)
                for kind, query in _QUERIES.items()}


def differences(a: dict[str, list[tuple[Any, ...]]], b: dict[str, list[tuple[Any, ...]]],
                ) -> list[str]:
    """Readable lines naming what one catalogue has that the other lacks."""
    lines = []
    for kind in _QUERIES:
        only_a = [row for row in a[kind] if row not in b[kind]]
        only_b = [row for row in b[kind] if row not in a[kind]]
        lines += [f"{kind}: only in the first:  {row}" for row in only_a]
        lines += [f"{kind}: only in the second: {row}" for row in only_b]
    return lines
