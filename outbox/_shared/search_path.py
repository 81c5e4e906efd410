"""The ``search_path`` of every connection the project opens: ``pg_catalog, pg_temp``.

Whoever may create in a schema on a session's path (``public`` where PUBLIC
keeps CREATE, as on PostgreSQL 14; any schema the application owns; one
named after the connecting role, which ``"$user"`` puts first) can plant a
function or an operator that matches a call better than the built-in one
(``public.*(numeric, double precision)`` beats casting to ``float8 * float8``):
it would run with the rights of whoever connects, a dispatcher that reads
every signing secret. So the dispatcher, the ``outbox`` command, the web
view, the migrator and the demo name ``pg_catalog`` first and ``pg_temp``
last (never searched for functions or operators when named explicitly), and
nothing else: every statement of the project names its tables ``outbox.``.

Directly, the setting travels in the startup packet (it then outranks
``ALTER DATABASE ... SET search_path``, which a database's owner may run).
Behind a transaction pooler a startup parameter is refused or ignored and a
session-level ``SET`` would leak to the pooler's next client, so each
transaction starts with :data:`SET_LOCAL` instead.
"""

from __future__ import annotations

from typing import LiteralString

PINNED: LiteralString = "pg_catalog, pg_temp"
"""The path itself, for ``set_config`` (the migrator, on a connection it was given)."""

STARTUP_OPTION: LiteralString = "-c search_path=pg_catalog,pg_temp"
"""For a connection's ``options`` (libpq's startup parameter)."""

SET_LOCAL: LiteralString = "SET LOCAL search_path = pg_catalog, pg_temp"
"""The first statement of a transaction on a connection that cannot take
:data:`STARTUP_OPTION` (a transaction pooler's), or that is not our own."""

PIN: LiteralString = ("SELECT pg_catalog.current_setting('search_path'), "
                      "pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)")
"""Pins the path for the rest of the transaction and returns the one it replaces."""

RESTORE: LiteralString = "SELECT pg_catalog.set_config('search_path', %s, true)"
"""Gives the caller's transaction its own path back (the value :data:`PIN` returned)."""

APPLIED: LiteralString = "SELECT pg_catalog.current_setting('search_path')"
"""The path a session runs on: whether :data:`STARTUP_OPTION` reached the server."""


def arrived(path: str) -> bool:
    """Whether ``path`` (as :data:`APPLIED` reads it) is the pinned one: a pooler that drops
    startup parameters (PgBouncer's ``ignore_startup_parameters = options``) leaves the
    database's own."""
    return path.replace(" ", "") == "pg_catalog,pg_temp"
