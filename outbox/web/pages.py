"""The four first pages, each read through the admin functions its command uses, each also as
that command's ``--json`` document (``?format=json``).

===================  ===========================================  =======================
address              what it shows                                its command
===================  ===========================================  =======================
``/``                the endpoints: backlog, circuit, problems,   ``outbox status``
                     and their last hour as a chart; ``?tenant=``
                     one tenant's, and where its deliveries wait
``/dead``            dead letters, newest first, filtered, paged  ``outbox dead list``
``/events/ID``       one event's story (``?payload=1``: its data)  ``outbox show``
``/search?q=TEXT``   events by id, idempotency or ordering key,   ``outbox events list``
                     or a tenant (``/?tenant=``)
===================  ===========================================  =======================

An endpoint's page is :mod:`.why`'s, the tenants' page :mod:`.tenants`'s.

Handlers are plain functions: Starlette runs them on its threads, where the
admin functions' blocking calls belong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

import psycopg
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from outbox import admin, history
from outbox._present import overview as databases_overview
from outbox._present import shapes
from outbox._present.words import describe_horizon
from outbox.errors import EventsNotFound
from outbox.web import tenants
from outbox.web.chart import Chart
from outbox.web.db import NoConnection
from outbox.web.guard import COOKIE, set_cookie
from outbox.web.params import BadParameter, dead_query, event_id, page_mark, tenant_of
from outbox.web.render import at, document, page, problem, wants_json
from outbox.web.search import search
from outbox.web.state import parts
from outbox.web.why import last_failures, last_hour

MAX_SEARCH = 1000
"""The longest text ``/search`` takes: longer than any id or key a person pastes."""


@dataclass(frozen=True)
class Overview:
    """What ``outbox status`` reads, read at once (and cached as one)."""

    status: admin.Status
    holder: admin.HorizonHolder | None
    waits: admin.KeyWaits
    failures: dict[str, str]
    """Per endpoint with a delivery still being retried (or dead within the hour), its latest
    failure in words."""
    last_hour: Chart | None
    """Every live endpoint's last hour together; None when it took longer than the
    statement timeout (the counts are shown all the same)."""


def read_overview(conn: Any) -> Overview:
    """The counts, the problems and the chart, read together (the cache keeps them as one).

    The endpoints page draws one chart, of every live endpoint together, rather
    than a line per endpoint: the page lists every endpoint, and at 5,000 of them
    a chart a row would be 300,000 bars for the browser and a wall nobody reads.
    One chart answers what the page is opened for (is anything failing, is the
    backlog growing, since when); the rows' problem column names the endpoint,
    whose own page charts it alone. It is one statement, whose cost follows the
    backlog and the hour's deliveries (each endpoint is read through its partial
    indexes), and it is read into the cache with the counts, so its cost is paid
    behind the page at most a tenth of the time, never per request.
    """
    try:
        chart: Chart | None = last_hour(conn)
    except psycopg.errors.QueryCanceled:
        chart = None
    return Overview(admin.status(conn), admin.horizon(conn), admin.key_waits(conn),
                    last_failures(conn), chart)


def home(request: Request) -> Response:
    """``/``: the endpoints of the one database; with many, the overview unless ``?db=``."""
    if request.app.state.sites is not None and not request.query_params.get("db"):
        return RedirectResponse("/databases", 303)
    return overview(request)


def endpoints(request: Request) -> Response:
    """``/endpoints``: the endpoints page is ``/`` (the address bookmarks and alerts hold);
    this one, which an endpoint's address suggests, leads there with its query."""
    query = request.url.query
    return RedirectResponse("/" + (f"?{query}" if query else ""), 308)


def databases(request: Request) -> Response:
    """``/databases``: one row per database, as ``outbox status --all`` prints them."""
    sites = request.app.state.sites
    if sites is None:
        return problem(request, 404, "this view serves one database: start it with "
                       "--databases FILE for the overview of many")
    # One overview read at a time: each opens a short connection to every database.
    if not request.app.state.overview.acquire(timeout=30):
        raise NoConnection("the databases' overview is being read for another request")
    try:
        rows = databases_overview.read_all(sites.databases, sites.aside)
    finally:
        request.app.state.overview.release()
    if wants_json(request):
        return document(databases_overview.shape(rows))
    return page(request, "databases.html", rows=rows)


def overview(request: Request) -> Response:
    """The endpoints, or with ``?tenant=T`` T's own (and, on the page, where T's
    deliveries wait and T's endpoints' last hour, read at request time: index probes)."""
    who = tenant_of(request.query_params)
    state = parts(request)
    view, age = state.counts.get()
    headers = {"Age": str(int(age))}
    status = view.status if who is None else replace(
        view.status, endpoints=[e for e in view.status.endpoints if e.tenant == who])
    if wants_json(request):
        return document(shapes.status(status, view.holder), headers=headers)
    horizon = describe_horizon(view.holder) if view.holder is not None else None
    chart, waiting = view.last_hour, None
    if who is not None:
        with state.readers.connection() as conn:
            waiting = tenants.waits(conn, who)
            try:
                chart = last_hour(conn, tenant=who) if status.endpoints else None
            except psycopg.errors.QueryCanceled:
                chart = None
    return page(request, "overview.html", headers=headers, view=view, listed=status,
                age=age, horizon=horizon, chart=chart, tenant=who, waiting=waiting)


def dead(request: Request) -> Response:
    config = parts(request).config
    query = dead_query(request.query_params, default_limit=config.page_size)
    with parts(request).readers.connection() as conn:
        letters = admin.dead_letters(conn, endpoint=query.endpoint, limit=query.limit + 1,
                                     where=query.where, before=query.before)
    more, letters = len(letters) > query.limit, letters[:query.limit]
    following = query.link(before=page_mark(letters[-1])) if more else None
    headers = {"Link": f'<{following}>; rel="next"'} if following else None
    if wants_json(request):
        return document(shapes.dead_letters(letters), headers=headers)
    return page(request, "dead.html", headers=headers, letters=letters, query=query,
                following=following, first=query.link(before=None) if query.before else None)


def event(request: Request) -> Response:
    found = event_id(request.path_params["event_id"])
    if found is None:
        return problem(request, 404, "not an event id (a UUID)")
    state = parts(request)
    with state.readers.connection() as conn:
        try:
            story = history.show(conn, found)
        except EventsNotFound:
            return problem(request, 404, f"no event {found} (unknown, or purged)")
    with_payload = request.query_params.get("payload") == "1"
    if wants_json(request):
        return document(shapes.story(story, payload=with_payload))
    cookie = request.cookies.get(COOKIE) or state.tokens.cookie()
    payload = (json.dumps(json.loads(story.payload), indent=2, ensure_ascii=False).splitlines()
               if with_payload else None)
    response = page(request, "event.html", story=story, payload=payload,
                    actions=state.config.allow_actions, token=state.tokens.token(cookie),
                    done=_done(request))
    if state.config.allow_actions and COOKIE not in request.cookies:
        set_cookie(response, request, COOKIE, cookie)
    return response


def _done(request: Request) -> dict[str, Any] | None:
    """What the action just taken did, as its redirect tells it (shown, never trusted)."""
    params = request.query_params
    verb, count = params.get("done"), params.get("count", "")
    if verb not in {"retried", "discarded"} or not count.isdigit():
        return None
    return {"verb": verb, "count": int(count), "endpoint": params.get("endpoint", "")}


def find(request: Request) -> Response:
    text = request.query_params.get("q", "").strip()
    if len(text) > MAX_SEARCH:
        raise BadParameter(f"q: at most {MAX_SEARCH} characters")
    if not text:
        if wants_json(request):
            raise BadParameter("q: give an event id, an idempotency key or an ordering key")
        return page(request, "search.html", text="", found=None)
    state = parts(request)
    # At most half the reading connections search at once, refused rather than queued:
    # the other pages stay served while someone searches a rare key of a large table.
    if not state.searches.acquire(blocking=False):
        raise NoConnection("every search slot is busy")
    as_json = wants_json(request)
    try:
        with state.readers.connection() as conn:
            found = search(conn, text, limit=state.config.page_size, tenants=not as_json)
    finally:
        state.searches.release()
    if as_json:
        return document(shapes.events(found.events))
    if found.tenant is not None and not found.events:
        return RedirectResponse(at(request, "/?" + urlencode({"tenant": found.tenant})), 303)
    if len(found.events) == 1 and found.tenant is None:
        return RedirectResponse(at(request, f"/events/{found.events[0].event_id}"), 303)
    return page(request, "search.html", text=text, found=found.events, tenant=found.tenant)
