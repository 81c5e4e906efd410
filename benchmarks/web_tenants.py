"""The web view by tenant with thousands of tenants: the tenants' list, one tenant's page and
the search that finds a tenant.

    python benchmarks/web_tenants.py [--tenants 5000] [--shared 2] [--pending 50000]
                                     [--finished 300000] [--rounds 5] [--explain]

One throwaway PostgreSQL, ``--tenants`` tenants each owning one live endpoint
(one per customer) and ``--shared`` endpoints without a tenant (an internal
CRM, an audit log: they receive every tenant's events); ``--pending``
undelivered deliveries (a thousandth in flight, as a fleet's requests are
few beside a backlog), half at the tenants' own endpoints and half at the
shared ones, over tenants drawn so that a few hold most of the backlog, and
``--finished`` delivered ones, all written in
bulk with SQL (then vacuumed and analysed). Times, on one connection with
the view's settings (``jit`` off, ``work_mem`` 16 MB, a 5 s statement
timeout): the whole tenants' list ``/tenants`` reads into its cache
(``web_tenants``, sorted), one tenant's backlog by endpoint (``?tenant=``),
its endpoints' chart, whether a text names a tenant (the search's probe; a
name that is not one walks every endpoint), the search of a tenant's name
(probe, then the ordering-key walk cut at a second), and beside them the
endpoints page's counts (``admin_status``) and ``status --tenants``'s read, which
the tenants' page made on every request before (past the view's timeout: it
may take longer). The figure is the median of
``--rounds``, the reads taken in turn within each round (milliseconds).
``--explain`` prints the plan of ``web_tenants`` (EXPLAIN ANALYZE, BUFFERS).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from outbox import admin
from outbox.migrate import migrate
from outbox.sql import queries
from outbox.testing import TemporaryPostgres
from outbox.web.search import search
from outbox.web.tenants import PAGE, is_tenant, read_tenants, waits
from outbox.web.why import last_hour

sys.path.insert(0, str(Path(__file__).resolve().parent))
from web_chart import timed, view_connection  # the view's session, the rounds' medians


def grow(dsn: str, tenants: int, shared: int, pending: int, finished: int) -> float:
    """The endpoints and the rows; seconds."""
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute(
            "INSERT INTO outbox.endpoints (name, url, events, events_like, tenant) "
            "SELECT 'customer-' || i || '-webhooks', 'http://127.0.0.1:9/c' || i, '{*}', "
            "'{%%}', 'tenant-' || i FROM generate_series(0, %s) AS i", (tenants - 1,))
        conn.execute(
            "INSERT INTO outbox.endpoints (name, url, events, events_like) "
            "SELECT 'shared-' || i, 'http://127.0.0.1:9/s' || i, '{*}', '{%%}' "
            "FROM generate_series(0, %s) AS i", (shared - 1,))
        for state, count in (("delivered", finished), ("pending", pending)):
            # The tenant: i^3 spread over the tenants, so that the first few hold most rows.
            conn.execute(
                "WITH ev AS (INSERT INTO outbox.events (id, type, payload, created_at, "
                "deliver_after, tenant) SELECT gen_random_uuid(), 't', '{}', "
                "now() - make_interval(secs => i %% 7200), now(), 'tenant-' || "
                "floor(%(tenants)s * power(random(), 3))::int FROM generate_series(1, %(n)s) "
                "AS i RETURNING id, seq, created_at, tenant) "
                "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, state, attempts, "
                "created_at, finished_at, tenant, lease_token, lease_expires_at) "
                "SELECT ev.id, CASE WHEN ev.seq %% 2 = 0 THEN own.id ELSE (SELECT min(id) "
                "FROM outbox.endpoints WHERE tenant IS NULL) + ev.seq %% %(shared)s END, "
                "ev.seq, CASE WHEN %(state)s = 'pending' AND ev.seq %% 1000 = 0 THEN "
                "'in_flight' ELSE %(state)s END, 0, ev.created_at, "
                "CASE WHEN %(state)s = 'delivered' THEN ev.created_at END, ev.tenant, "
                "CASE WHEN %(state)s = 'pending' AND ev.seq %% 1000 = 0 THEN gen_random_uuid() "
                "END, CASE WHEN %(state)s = 'pending' AND ev.seq %% 1000 = 0 THEN now() + "
                "interval '1 hour' END FROM ev JOIN outbox.endpoints own "
                "ON own.tenant = ev.tenant",
                {"n": count, "state": state, "tenants": tenants, "shared": shared})
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - start


def unbounded(conn: psycopg.Connection[Any], read: Callable[[psycopg.Connection[Any]], Any],
              ) -> Any:
    """``read`` past the view's statement timeout (a minute), to say how long it takes."""
    with conn.transaction():
        conn.execute("SET LOCAL statement_timeout = '60s'")
        return read(conn)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tenants", type=int, default=5000)
    parser.add_argument("--shared", type=int, default=2)
    parser.add_argument("--pending", type=int, default=50_000)
    parser.add_argument("--finished", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    with TemporaryPostgres() as pg:
        took = grow(pg.dsn, args.tenants, args.shared, args.pending, args.finished)
        print(f"{args.tenants:,} tenants, {args.shared} shared endpoints, {args.pending:,} "
              f"undelivered and {args.finished:,} delivered; written and vacuumed in "
              f"{took:.0f} s")
        with view_connection(pg.dsn) as conn:
            listed = read_tenants(conn)
            heavy, quiet = listed[0].tenant, listed[-1].tenant
            print(f"tenants listed: {len(listed):,}; the largest backlog {heavy} "
                  f"({listed[0].backlog:,}), the smallest {quiet} ({listed[-1].backlog:,})")
            timed({
                "every tenant, sorted (/tenants' cache)": lambda: read_tenants(conn),
                "a page cut from it": lambda: listed[PAGE:2 * PAGE],
                "the largest tenant's backlog by endpoint": lambda: waits(conn, heavy),
                "a quiet tenant's backlog by endpoint": lambda: waits(conn, quiet),
                "a tenant's endpoints' chart": lambda: last_hour(conn, tenant=heavy),
                "is it a tenant? (one that is)": lambda: is_tenant(conn, quiet),
                "is it a tenant? (no tenant: every endpoint)": lambda: is_tenant(conn, "no"),
                "the search of a tenant's name": lambda: search(conn, quiet, limit=50,
                                                                tenants=True),
                "the endpoints page's counts (admin_status)": lambda: admin.status(conn),
                "status --tenants (what /tenants read before)": lambda: unbounded(
                    conn, admin.tenant_backlogs),
            }, args.rounds)
            if args.explain:
                plan = conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) "
                                    + queries["web_tenants"].encode()).fetchall()
                print("\n".join(line for (line,) in plan))


if __name__ == "__main__":
    main()
