"""The parts one running view shares between its requests, built once by :mod:`.app`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from outbox.web.cache import Snapshot
from outbox.web.config import WebConfig
from outbox.web.db import Pool
from outbox.web.guard import Tokens

if TYPE_CHECKING:
    from outbox.web.pages import Overview
    from outbox.web.sites import Sites
    from outbox.web.tenants import TenantRow

_HELD = "outbox.held"
"""The request scope's key for the parts of the database it holds (``?db=``'s), if any."""


@dataclass(frozen=True)
class Parts:
    config: WebConfig
    readers: Pool
    """Read-only connections, for every page."""
    writer: Pool | None
    """The one connection that may write, for the actions; None without --allow-actions."""
    counts: Snapshot[Overview]
    tenants: Snapshot[list[TenantRow]]
    """Every tenant's line of ``/tenants``, read whole and cached as the counts are."""
    tokens: Tokens
    searches: threading.BoundedSemaphore
    """Searches running at once: an ordering key's walk may take the whole statement
    timeout, and searches must not hold every reading connection (see pages.find)."""


def parts(request: Request) -> Parts:
    """The parts of the database the request is about: the one database, or ``?db=``'s,
    held for the rest of the request (:class:`Hold` lets it go)."""
    app: Any = request.app
    sites = app.state.sites
    if sites is None:
        return cast(Parts, app.state.parts)
    held: list[Parts] = request.scope[_HELD]
    if not held:
        held.append(sites.hold(request.query_params.get("db") or None))
    return held[0]


class Hold:
    """Around each request with ``--databases``: the database a page holds (through
    :func:`parts`) is let go once its answer is sent, so that its pools are never closed
    under a page still reading."""

    def __init__(self, app: ASGIApp, *, sites: Sites | None) -> None:
        self._app = app
        self._sites = sites

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._sites is None or scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        held: list[Parts] = []
        scope[_HELD] = held
        try:
            await self._app(scope, receive, send)
        finally:
            for part in held:
                self._sites.release(part)
