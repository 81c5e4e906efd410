"""The composition root of ``outbox web``: the connections, the counts' cache, the guard and
the routes, built once from a :class:`~outbox.web.config.WebConfig`.

Errors a page may meet are answered here, once for all pages: a bad query
parameter is a 400 with the command's message; an unknown endpoint a 404; a
statement cancelled by its timeout, a database that cannot be reached or
every connection busy a 503 saying which; any other database error a 500
with its first line (never a traceback).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from outbox._shared.database_catalog import Refreshed
from outbox._shared.schema import MISSING, is_missing
from outbox._shared.text import first_line
from outbox.errors import EndpointNotFound
from outbox.web import actions, pages, tenants, why
from outbox.web.cache import Snapshot
from outbox.web.config import WebConfig
from outbox.web.db import NoConnection, Pool
from outbox.web.guard import Guard, Tokens
from outbox.web.params import BadParameter
from outbox.web.render import problem
from outbox.web.reread import Reread
from outbox.web.sites import CONNECTIONS, IDLE_SECONDS, Sites, UnknownDatabase, close
from outbox.web.state import Hold, Parts

log = logging.getLogger("outbox.web")


def _parts(config: WebConfig, dsn: str, tokens: Tokens, *, size: int,
           max_idle: float = 600.0) -> Parts:
    """One database's pools and counts' cache."""
    readers = Pool(dsn, size=size, read_only=True, wait=10, max_idle=max_idle,
                   statement_timeout=config.statement_timeout_seconds)
    writer = (Pool(dsn, size=1, read_only=False, wait=10, max_idle=max_idle,
                   statement_timeout=config.statement_timeout_seconds)
              if config.allow_actions else None)

    def count() -> pages.Overview:
        with readers.connection() as conn:
            return pages.read_overview(conn)

    def list_tenants() -> list[tenants.TenantRow]:
        with readers.connection() as conn:
            return tenants.read_tenants(conn)

    return Parts(config=config, readers=readers, writer=writer, counts=Snapshot(count),
                 tenants=Snapshot(list_tenants, what="the tenants' list"), tokens=tokens,
                 searches=threading.BoundedSemaphore(max(1, size // 2)))


def create_app(config: WebConfig) -> Starlette:
    """The ASGI application (uvicorn serves it; tests drive it with Starlette's client)."""
    tokens = Tokens()
    state: Parts | None = None
    sites: Sites | None = None
    reread: Reread | None = None
    if config.databases:
        sites = Sites(config.databases, lambda database: _parts(
            config, database.dsn, tokens, size=min(config.connections, CONNECTIONS),
            max_idle=IDLE_SECONDS), aside=config.set_aside)
        if config.databases_file:
            reread = Reread(config.databases_file, Refreshed(
                config.databases, config.refresh_seconds, aside=config.set_aside), sites)
    else:
        state = _parts(config, config.dsn, tokens, size=config.connections)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if state is not None:
            state.counts.warm()
        if reread is not None:
            reread.start()
        yield
        if reread is not None:
            reread.stop()
        if state is not None:
            close(state)
        if sites is not None:
            sites.close()

    routes = [
        Route("/", pages.home),
        Route("/databases", pages.databases),
        Route("/dead", pages.dead),
        Route("/search", pages.find),
        Route("/events/{event_id}", pages.event),
        Route("/events/{event_id}/retry", actions.retry, methods=["POST"]),
        Route("/events/{event_id}/discard", actions.discard, methods=["POST"]),
        Route("/endpoints", pages.endpoints),
        Route("/endpoints/{name}", why.endpoint),
        Route("/endpoints/{name}/retry-now", actions.retry_now, methods=["POST"]),
        Route("/tenants", tenants.tenants),
        Mount("/static", StaticFiles(packages=[("outbox.web", "static")]), name="static"),
    ]
    guard = Middleware(Guard, password=config.password, hosts=config.hosts,
                       read_only=None if config.allow_actions else actions.READ_ONLY)
    app = Starlette(routes=routes, middleware=[guard, Middleware(Hold, sites=sites)],
                    lifespan=lifespan,
                    exception_handlers={BadParameter: _bad, EndpointNotFound: _unknown,
                                        NoConnection: _busy, psycopg.Error: _database,
                                        UnknownDatabase: _no_database})
    app.state.parts = state
    app.state.sites = sites
    app.state.overview = threading.BoundedSemaphore(1)
    return app


async def _no_database(request: Request, exc: Exception) -> Response:
    missing = isinstance(exc, UnknownDatabase) and exc.missing
    return problem(request, 400 if missing else 404, str(exc))


async def _bad(request: Request, exc: Exception) -> Response:
    return problem(request, 400, str(exc))


async def _unknown(request: Request, exc: Exception) -> Response:
    return problem(request, 404, str(exc))


async def _busy(request: Request, exc: Exception) -> Response:
    return problem(request, 503, f"{exc}: try again in a moment")


async def _database(request: Request, exc: Exception) -> Response:
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return problem(request, 503, "the database did not answer within the view's statement "
                       "timeout: narrow the filters, or try again when it is less busy")
    if isinstance(exc, psycopg.Error) and is_missing(exc):
        return problem(request, 503, MISSING)
    if isinstance(exc, psycopg.OperationalError):
        return problem(request, 503, f"cannot reach the database: {first_line(exc)}")
    log.error("database error on %s: %s", request.url.path, first_line(exc))
    return problem(request, 500, f"database error: {first_line(exc)}")
