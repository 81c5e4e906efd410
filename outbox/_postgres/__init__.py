"""A throwaway PostgreSQL server, started from the binaries this machine has.

``outbox demo`` and ``outbox.testing`` (the test suites, ours and users') both
start one: ``cluster`` runs it (initdb, start, stop, a superuser DSN), and
``access`` lets it run as root too, where PostgreSQL refuses to (it runs as
the ``postgres`` user, from binaries and a data directory that user can reach).
Not a test helper in itself: a part of the demo as much as of the tests.
"""

from outbox._postgres.cluster import PostgresNotFound, TemporaryPostgres, find_bindir, free_port

__all__ = ["PostgresNotFound", "TemporaryPostgres", "find_bindir", "free_port"]
