"""The page for the why: ``/endpoints/NAME`` (what an endpoint is, what stops it and who
waits for it); the tenants' page is :mod:`.tenants`'s.

An endpoint's page answers as the viewer role of ``outbox grants --viewer``
too: that role may not read an endpoint's secret, URL or headers, so the
page shows the options it may read and leaves those out (null in its JSON).
Its failed attempts are those of deliveries still being retried as well as
dead ones: the cause of a failing endpoint is on the page long before
anything dies.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row
from starlette.requests import Request
from starlette.responses import Response

from outbox import admin, endpoints
from outbox._present import shapes
from outbox._present.words import retry_now_said
from outbox.errors import EndpointNotFound
from outbox.sql import queries
from outbox.web.chart import Chart, chart
from outbox.web.guard import COOKIE, set_cookie
from outbox.web.render import document, page, wants_json
from outbox.web.state import parts

RECENT_FAILURES = 20
"""An endpoint's page lists this many failed attempts, newest first."""
TENANTS_SHOWN = 50
"""An endpoint's page lists this many tenants' backlogs, the largest first."""


@dataclass(frozen=True)
class Circuit:
    """The fleet's circuit breaker of one endpoint, as ``outbox.endpoint_state`` holds it."""

    state: str
    opened_at: datetime | None
    """When it last opened (kept after it closed again)."""
    consecutive_failures: int
    window_attempts: int
    """Attempts counted in the breaker's window (its buckets added)."""
    window_failures: int
    """Of those, the failures: what opens the circuit past --breaker-rate."""


@dataclass(frozen=True)
class Failure:
    at: datetime
    event_id: Any
    status: int | None
    reason: str
    error: str | None


@dataclass(frozen=True)
class EndpointView:
    options: dict[str, Any]
    circuit: Circuit
    backlogs: list[admin.TenantBacklog]
    failures: list[Failure]
    last_hour: Chart
    """Delivered, failed attempts and the backlog, per minute."""
    viewer: bool
    """True when the role may not read the secret, URL or headers (left out)."""


def read_endpoint(conn: psycopg.Connection[Any], name: str) -> EndpointView:
    """Everything an endpoint's page shows; :class:`EndpointNotFound` for no live one."""
    viewer = False
    try:
        options = endpoints.get(conn, name)
    except psycopg.errors.InsufficientPrivilege:
        viewer, options = True, _readable_options(conn, name)
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(queries["web_endpoint_circuit"], {"name": name}).fetchone()
        if row is None:
            raise EndpointNotFound(f"no endpoint named {name!r}")
        circuit = Circuit(str(row[0]), row[1], int(row[2]), int(row[3]), int(row[4]))
        failed = cur.execute(queries["web_endpoint_failures"],
                             {"name": name, "limit": RECENT_FAILURES}).fetchall()
    backlogs = admin.tenant_backlogs(conn, per_endpoint=TENANTS_SHOWN, endpoint=name)
    failures = [Failure(at, event, status, str(reason), error)
                for at, event, status, reason, error in failed]
    return EndpointView(options, circuit, backlogs, failures, last_hour(conn, name), viewer)


def last_hour(conn: psycopg.Connection[Any], name: str | None = None, *,
              tenant: str | None = None) -> Chart:
    """The chart of one live endpoint's last hour, of one tenant's live endpoints
    together, or (neither) of every live endpoint's together: one statement either way,
    whatever the number of endpoints."""
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        minutes = cur.execute(queries["web_minutes"],
                              {"name": name, "tenant": tenant}).fetchall()
    return chart([(m, int(d), int(f), int(p)) for m, d, f, p in minutes])


def _readable_options(conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
    """``endpoints list --json``'s object from the columns the viewer may read: the URL,
    the signing secret, the TLS files and the headers are null."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(queries["web_endpoint_options"], {"name": name}).fetchone()
    if row is None:
        raise EndpointNotFound(f"no endpoint named {name!r}")
    return endpoints.as_viewer_json(row)


def endpoint_shape(view: EndpointView) -> dict[str, Any]:
    """``?format=json``: the ``endpoints list --json`` object, with the circuit, the
    backlog by tenant and the latest failed attempts."""
    c = view.circuit
    return {
        **view.options,
        "circuit": c.state,
        "circuit_opened_at": shapes.rfc3339(c.opened_at),
        "circuit_window": {"attempts": c.window_attempts, "failures": c.window_failures,
                           "consecutive_failures": c.consecutive_failures},
        "backlog_by_tenant": [{"tenant": b.tenant, "pending": b.pending,
                               "in_flight": b.in_flight,
                               "oldest_pending_seconds": b.oldest_pending_seconds}
                              for b in view.backlogs],
        "recent_failures": [{"at": shapes.rfc3339(f.at), "event_id": str(f.event_id),
                             "status": f.status, "reason": f.reason, "error": f.error}
                            for f in view.failures],
    }


def endpoint(request: Request) -> Response:
    """``/endpoints/NAME``: an unknown or removed name is a 404."""
    name = request.path_params["name"]
    state = parts(request)
    with state.readers.connection() as conn:
        view = read_endpoint(conn, name)
    if wants_json(request):
        return document(endpoint_shape(view))
    cookie = request.cookies.get(COOKIE) or state.tokens.cookie()
    response = page(request, "endpoint.html", view=view, options=view.options,
                    actions=state.config.allow_actions, token=state.tokens.token(cookie),
                    done=_done(request, view.options["name"]))
    if state.config.allow_actions and COOKIE not in request.cookies:
        set_cookie(response, request, COOKIE, cookie)
    return response


def _done(request: Request, name: str) -> str | None:
    """What the retry-now just taken did, as its redirect tells it (shown, never trusted),
    in the command's words."""
    params = request.query_params
    count = params.get("due", "")
    if params.get("done") != "retry-now" or not count.isdigit():
        return None
    done = endpoints.RetryNow(due=int(count), enabled=params.get("enabled") != "0",
                              half_open=params.get("half_open") == "1")
    said = retry_now_said(done, name)
    return said[:1].upper() + said[1:] + "."


def last_failures(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Per live endpoint with a delivery still being retried (or dead within the hour), its
    latest failure in words (``HTTP 500: ...``, ``timeout: ...``): the endpoints page's
    problem column."""
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries["web_last_failures"]).fetchall()
    return {str(name): failure_words(status, str(reason), error)
            for name, status, reason, error, _ in rows}


def failure_words(status: int | None, reason: str, error: str | None) -> str:
    """One failed attempt in a few words: its status (or reason) and its error's first
    line."""
    said = f"HTTP {status}" if status is not None else reason
    first = " ".join((error or "").split())
    return f"{said}: {first}" if first else said
