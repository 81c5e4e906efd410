"""Apply the packaged schema and its numbered upgrade steps, recording the version.

``schema.sql`` is idempotent and brings any earlier version up to its own
(it adds what is missing); a change it cannot express that way (moving data,
say) is a file ``sql/migrations/NNNN_name.sql`` applied once, in order, in
one transaction with its version row. A transaction-scoped advisory lock serialises
concurrent migrators (two pods starting at once).
"""

from __future__ import annotations

from typing import Any

import psycopg

from outbox.sql import migrations, queries, schema_file_version, schema_text

SCHEMA_VERSION = max([schema_file_version(), *(version for version, _ in migrations())])
"""The version this package's schema ends at."""


def migrate(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """Bring the database up to :data:`SCHEMA_VERSION`; returns (before, after).

    Commits on success. Safe to run any number of times, from several
    processes at once.
    """
    with conn.transaction():
        conn.execute(queries["migrate_lock"])
        before = _current_version(conn)
        conn.execute(schema_text().encode())
        for version, sql in migrations():
            if version > max(before, schema_file_version()):
                conn.execute(sql.encode())
                conn.execute(queries["record_version"], {"version": version})
        after = _current_version(conn)
    return before, after


def _current_version(conn: psycopg.Connection[Any]) -> int:
    exists = conn.execute(queries["schema_exists"]).fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute(queries["schema_version"]).fetchone()
    return int(row[0]) if row else 0
