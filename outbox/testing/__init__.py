"""Helpers for tests: of this project, and of applications that publish events.

- :class:`TemporaryPostgres` starts a throwaway PostgreSQL cluster from the
  server binaries on the machine (the test suite and ``outbox demo`` use it).
- :func:`published_events` / :func:`assert_published` read the events the
  caller's *uncommitted* transaction has published, so an application's test
  can check what it published without committing.
- :func:`signed_request` / :func:`signed_batch` build a delivery as the
  dispatcher would send it (headers and body, signed), for a receiver's tests.
"""

from outbox._postgres import PostgresNotFound, TemporaryPostgres, find_bindir, free_port
from outbox.testing._assertions import assert_published, published_events
from outbox.testing._receiver import Receiver, Request, Response
from outbox.testing._signed import SignedRequest, signed_batch, signed_request

__all__ = [
    "PostgresNotFound",
    "Receiver",
    "Request",
    "Response",
    "SignedRequest",
    "TemporaryPostgres",
    "assert_published",
    "find_bindir",
    "free_port",
    "published_events",
    "signed_batch",
    "signed_request",
]
