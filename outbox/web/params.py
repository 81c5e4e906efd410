"""Query parameters read as the commands read their options: the same types, the same
refusals (a page answers 400 with the message the command prints for exit 2).

``/dead`` takes ``endpoint``, ``type`` (repeatable: or-ed), ``tenant``,
``since`` and ``until`` as ``outbox dead list`` takes them, plus ``before``,
where a page starts (its previous page's last row) and ``limit``; ``/`` takes
``tenant`` too, and ``/tenants`` ``after`` (its previous page's last row).
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from outbox import admin
from outbox._present.args import EmptyWindow, check_window, moment, tenant, type_pattern
from outbox._present.shapes import rfc3339

T = TypeVar("T")
MAX_LIMIT = 500


class BadParameter(ValueError):
    """A query parameter no command would take: the page answers 400 with this text."""


def _read(name: str, text: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(text)
    except argparse.ArgumentTypeError as exc:
        raise BadParameter(f"{name}: {exc}") from None


def _one(params: QueryParams, name: str) -> str | None:
    """A parameter's value; an empty one (a form's blank field) is no value."""
    value = params.get(name, "").strip()
    return value or None


@dataclass(frozen=True)
class DeadQuery:
    """One page of ``/dead``: the filters, where it starts, how many."""

    endpoint: str | None
    where: admin.EventFilter
    before: admin.DeadPage | None
    limit: int
    raw: tuple[tuple[str, str], ...]
    """The filters as given, for the links to the next page and back to the first."""

    def link(self, **changes: str | None) -> str:
        """``/dead`` with these filters and ``changes`` (None drops a parameter)."""
        pairs = [(k, v) for k, v in self.raw if k not in changes]
        pairs += [(k, v) for k, v in changes.items() if v is not None]
        return "/dead" + (f"?{urlencode(pairs)}" if pairs else "")


def dead_query(params: QueryParams, *, default_limit: int) -> DeadQuery:
    """The filters of ``outbox dead list`` from ``/dead``'s query string."""
    since = until = None
    if (text := _one(params, "since")) is not None:
        since = _read("since", text, moment)
    if (text := _one(params, "until")) is not None:
        until = _read("until", text, moment)
    try:
        check_window(since, until)
    except EmptyWindow as exc:
        raise BadParameter(exc.said("")) from None
    types = tuple(_read("type", t.strip(), type_pattern)
                  for t in params.getlist("type") if t.strip())
    who = tenant_of(params)
    limit = default_limit
    if (text := _one(params, "limit")) is not None:
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise BadParameter(f"limit: give a whole number from 1 to {MAX_LIMIT}")
        limit = int(text)
    raw = tuple((k, v) for k, v in params.multi_items()
                if k in {"endpoint", "type", "tenant", "since", "until", "limit", "format", "db"}
                and v.strip())
    return DeadQuery(
        endpoint=_one(params, "endpoint"),
        where=admin.EventFilter(types, since, until, who),
        before=_page(_one(params, "before")), limit=limit, raw=raw)


def read_tenant(name: str, text: str) -> str:
    """A tenant given as the parameter ``name``, refused as ``--tenant`` refuses it."""
    return _read(name, text, tenant)


def tenant_of(params: QueryParams) -> str | None:
    """``tenant``: one tenant's rows only (``/dead``, ``/``); None when not given."""
    who = _one(params, "tenant")
    return None if who is None else read_tenant("tenant", who)


def page_mark(letter: admin.DeadLetter) -> str:
    """The ``before`` of the page after ``letter``: its failed_at (``-``: none) and id."""
    return f"{rfc3339(letter.failed_at) or '-'},{letter.delivery_id}"


def _page(text: str | None) -> admin.DeadPage | None:
    if text is None:
        return None
    at, _, delivery = text.rpartition(",")
    try:
        when = None if at == "-" else datetime.fromisoformat(at)
        number = int(delivery)
        if (when is not None and when.tzinfo is None) or not 0 <= number < 2**63:
            raise ValueError(text)
        return admin.DeadPage(when, number)
    except ValueError:
        raise BadParameter("before: not a place in the list (follow the page's own "
                           "links)") from None


def event_id(text: str) -> uuid.UUID | None:
    """An event id from a path or a search, or None when the text is not one."""
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        return None
