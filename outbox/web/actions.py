"""The actions of the pages, with ``--allow-actions``: retry and discard one dead delivery
(an event's page), make an endpoint's pending deliveries due now (its page), each the
statement its command runs.

``POST /events/ID/retry`` does what ``outbox dead retry --event-id ID`` does
for the delivery at the form's ``endpoint``; ``/discard`` what ``outbox dead
discard`` does. A POST is refused with 403, and changes nothing, when the
view is read-only or the form's token is not the one bound to the browser's
cookie (:mod:`.guard`). Each action taken is logged with what it did, to
which event and endpoint, and for which client.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from outbox import admin, endpoints
from outbox._shared.text import counted
from outbox.errors import EndpointNotFound
from outbox.web.guard import COOKIE
from outbox.web.params import event_id
from outbox.web.render import at, problem
from outbox.web.state import Parts, parts

log = logging.getLogger("outbox.web")

MAX_FORM = 4096
READ_ONLY = ("this view is read-only: start `outbox web` with --allow-actions to retry and "
             "discard dead letters, or make an endpoint's deliveries due now")


async def retry(request: Request) -> Response:
    return await _act(request, "retried")


async def discard(request: Request) -> Response:
    return await _act(request, "discarded")


async def _allowed(request: Request) -> tuple[Parts, dict[str, str]] | Response:
    """The view's parts and the POST's form when it may act; else the refusal (403 for a
    read-only view or a missing or wrong token)."""
    state = parts(request)
    if not state.config.allow_actions or state.writer is None:
        return problem(request, 403, READ_ONLY)
    form = await _fields(request)
    refusal = _refusal(request, state, form)
    if refusal is not None:
        return refusal
    assert form is not None
    return state, form


async def _act(request: Request, verb: str) -> Response:
    allowed = await _allowed(request)
    if isinstance(allowed, Response):
        return allowed
    state, form = allowed
    found, endpoint = event_id(request.path_params["event_id"]), form["endpoint"]
    try:
        count = await run_in_threadpool(_run, state, verb, found, endpoint)
    except EndpointNotFound:
        return problem(request, 409, f"endpoint {endpoint!r} was removed: its dead letters "
                       "cannot be retried (discard them, or replay the event to a live "
                       "endpoint with `outbox replay`)")
    log.info("%s %s of event %s at endpoint %r, for %s", verb,
             counted(count, "dead delivery", "dead deliveries"), found, endpoint,
             _client(request))
    done = urlencode({"done": verb, "endpoint": endpoint, "count": count})
    return RedirectResponse(at(request, f"/events/{found}?{done}"), 303)


async def retry_now(request: Request) -> Response:
    """Make the endpoint's pending deliveries due now (its circuit half-open if open)."""
    allowed = await _allowed(request)
    if isinstance(allowed, Response):
        return allowed
    state, name = allowed[0], request.path_params["name"]
    done = await run_in_threadpool(_retry_now, state, name)
    log.info("made %s at endpoint %r due now%s, for %s",
             counted(done.due, "pending delivery", "pending deliveries"), name,
             " (its circuit half-open)" if done.half_open else "", _client(request))
    said = urlencode({"done": "retry-now", "due": done.due, "half_open": int(done.half_open),
                      "enabled": int(done.enabled)})
    return RedirectResponse(at(request, f"/endpoints/{quote(name, safe='')}?{said}"), 303)


def _retry_now(state: Parts, name: str) -> endpoints.RetryNow:
    assert state.writer is not None
    with state.writer.connection() as conn:
        return endpoints.retry_endpoint_now(conn, name)


def _refusal(request: Request, state: Parts, form: dict[str, str] | None) -> Response | None:
    """Why this POST changes nothing, as its answer; None when it may go ahead."""
    if form is None:
        return problem(request, 413, f"a form of at most {MAX_FORM} bytes, urlencoded")
    if not state.tokens.valid(request.cookies.get(COOKIE), form.get("token")):
        log.warning("refused a POST to %s from %s: its token is missing or wrong",
                    request.url.path, _client(request))
        return problem(request, 403, "this form's token is missing or does not match this "
                       "browser's cookie: load the page again and resubmit")
    if "event_id" not in request.path_params:
        return None
    if event_id(request.path_params["event_id"]) is None:
        return problem(request, 404, "not an event id (a UUID)")
    if not form.get("endpoint"):
        return problem(request, 400, "endpoint: the form names no endpoint")
    return None


def _client(request: Request) -> str:
    return request.client.host if request.client else "-"


async def _fields(request: Request) -> dict[str, str] | None:
    """The fields of an urlencoded form (the first of each name); None when the body is
    larger than :data:`MAX_FORM` (two fields need little room) or of another kind."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    if kind != "application/x-www-form-urlencoded" and body:
        return None
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def _run(state: Parts, verb: str, found: Any, endpoint: str) -> int:
    assert state.writer is not None
    with state.writer.connection() as conn:
        if verb == "retried":
            return admin.retry_dead(conn, event_ids=[found], endpoint=endpoint).retried
        return admin.discard_dead(conn, event_ids=[found], endpoint=endpoint)
