"""The web view by tenant, for support's path from a customer to its endpoints: ``/tenants``
(every tenant, the largest backlog first, paged), what ``/?tenant=T`` adds to the
endpoints page (where T's deliveries wait), and whether a search's text names a tenant.

A tenant is listed when it owns a live endpoint or waits in a live endpoint's
backlog (its own endpoints' or those without a tenant, which receive every
tenant's events). Listing them all costs a pass over the undelivered rows
(their creation times among them, for the oldest age), as the endpoints
page's counts do: so the list is read whole into a cache
(:class:`~outbox.web.cache.Snapshot`, as the counts are) and its pages are
cut from it, 100 at a time, each page after the first starting after the
previous page's last row (``after=BACKLOG,TENANT``: a keyset, steady while
the counts move). One tenant's own reads (``?tenant=``, the search) are
index probes per live endpoint, at request time.
"""

from __future__ import annotations

import argparse
import bisect
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg.rows import tuple_row
from starlette.requests import Request
from starlette.responses import Response

from outbox._present.args import tenant as tenant_type
from outbox.sql import queries
from outbox.web.params import BadParameter, read_tenant
from outbox.web.render import at, document, page, wants_json
from outbox.web.state import parts

PAGE = 100
"""Tenants a page of ``/tenants`` lists."""


@dataclass(frozen=True)
class TenantRow:
    """One tenant's line of ``/tenants`` (its JSON object, key for key)."""

    tenant: str
    endpoints: int
    """Live endpoints it owns."""
    pending: int
    in_flight: int
    oldest_pending_seconds: float
    """Age of its oldest pending delivery at any live endpoint; 0 when none."""

    @property
    def backlog(self) -> int:
        return self.pending + self.in_flight

    @property
    def place(self) -> tuple[int, str]:
        """Where it sorts: the largest backlog first, then by name."""
        return (-self.backlog, self.tenant)

    def shape(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "endpoints": self.endpoints, "pending": self.pending,
                "in_flight": self.in_flight,
                "oldest_pending_seconds": self.oldest_pending_seconds}


@dataclass(frozen=True)
class Waiting:
    """One tenant's backlog at one live endpoint."""

    endpoint: str
    pending: int
    in_flight: int
    oldest_pending_seconds: float


def read_tenants(conn: psycopg.Connection[Any]) -> list[TenantRow]:
    """Every tenant with a live endpoint or a backlog, the largest backlog first."""
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["web_tenants"]).fetchall()
    found = [TenantRow(str(t), int(e), int(p), int(f), round(float(o), 3))
             for t, e, p, f, o in rows]
    return sorted(found, key=lambda row: row.place)


def waits(conn: psycopg.Connection[Any], tenant: str) -> list[Waiting]:
    """Where ``tenant``'s deliveries wait: per live endpoint, the largest backlog first."""
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["web_tenant_waits"], {"tenant": tenant}).fetchall()
    return [Waiting(str(n), int(p), int(f), round(float(o), 3)) for n, p, f, o in rows]


def is_tenant(conn: psycopg.Connection[Any], text: str) -> bool:
    """Whether ``text`` names a tenant ``/tenants`` lists (False for what no event could
    carry as its tenant)."""
    try:
        tenant_type(text)
    except argparse.ArgumentTypeError:
        return False
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(queries["web_is_tenant"], {"tenant": text}).fetchone()
    return bool(row and row[0])


def _after(text: str | None) -> tuple[int, str] | None:
    """``after=BACKLOG,TENANT``: the place after which a page starts."""
    if text is None:
        return None
    count, _, name = text.partition(",")
    if not count.isdigit() or not name:
        raise BadParameter("after: not a place in the list (follow the page's own links)")
    return (-int(count), read_tenant("after", name))


def tenants(request: Request) -> Response:
    """``/tenants``: a page of every tenant, the largest backlog first; the next page in a
    ``Link: <...>; rel="next"`` header (and a link on the page)."""
    after = _after(request.query_params.get("after", "").strip() or None)
    rows, age = parts(request).tenants.get()
    start = bisect.bisect_right(rows, after, key=lambda row: row.place) if after else 0
    shown = rows[start:start + PAGE]
    following = None
    if start + PAGE < len(rows):
        last = shown[-1]
        following = at(request, "/tenants?" + urlencode({"after": f"{last.backlog},"
                                                                  f"{last.tenant}"}))
    headers = {"Age": str(int(age))}
    if following is not None:
        headers["Link"] = f'<{following}>; rel="next"'
    if wants_json(request):
        return document({"tenants": [row.shape() for row in shown]}, headers=headers)
    return page(request, "tenants.html", headers=headers, rows=shown, age=age,
                following=following, first=at(request, "/tenants") if after else None,
                start=start, total=len(rows), page_size=PAGE)
