"""The parts one running view shares between its requests, built once by :mod:`.app`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request

from outbox.web.cache import Snapshot
from outbox.web.config import WebConfig
from outbox.web.db import Pool
from outbox.web.guard import Tokens

if TYPE_CHECKING:
    from outbox.web.pages import Overview


@dataclass(frozen=True)
class Parts:
    config: WebConfig
    readers: Pool
    """Read-only connections, for every page."""
    writer: Pool | None
    """The one connection that may write, for the actions; None without --allow-actions."""
    counts: Snapshot[Overview]
    tokens: Tokens
    searches: threading.BoundedSemaphore
    """Searches running at once: an ordering key's walk may take the whole statement
    timeout, and searches must not hold every reading connection (see pages.find)."""


def parts(request: Request) -> Parts:
    """The parts of the database the request is about: the one database, or ``?db=``'s."""
    app: Any = request.app
    sites = app.state.sites
    if sites is None:
        return cast(Parts, app.state.parts)
    return cast(Parts, sites.get(request.query_params.get("db") or None))
