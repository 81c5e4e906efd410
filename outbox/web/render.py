"""Pages and documents: the Jinja2 templates beside this module, and JSON as the commands
print it.

Every value a template shows is escaped for HTML (autoescape) and, before
that, made printable as the commands make it for a terminal: a stored type
or error holding bidi overrides or control characters is shown with visible
escapes, not obeyed by the browser.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from outbox import __version__
from outbox._present.shapes import rfc3339
from outbox._present.words import format_age
from outbox._shared.text import printable


def _shown(value: Any) -> Any:
    """Every ``{{ value }}``: text made printable (markup the templates built is left)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return printable(value)
    return "" if value is None else value


LONG_NAME = 40
"""A name longer than this many characters may wrap in a table (style.css, td.name.long);
a shorter one keeps to one line."""


def _name(text: str | None) -> str:
    """The class of a table cell holding ``text``, a name shown whole."""
    return "name long" if text is not None and len(text) > LONG_NAME else "name"


def _when(moment: Any) -> str:
    return rfc3339(moment, seconds=True) or "-"


def at(request: Request, url: str) -> str:
    """``url`` keeping the request's ``?db=`` (every link of a page of one database of many)."""
    name = request.query_params.get("db")
    if not name:
        return url
    joiner = "" if url.endswith(("?", "&")) else "&" if "?" in url else "?"
    return f"{url}{joiner}{urlencode({'db': name})}"


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("outbox.web", "templates"),
                      autoescape=select_autoescape(default=True), finalize=_shown,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    env.filters["name"] = _name
    env.filters["age"] = format_age
    env.filters["flat"] = lambda text: " ".join((text or "").split())
    env.globals["version"] = __version__
    env.globals["at"] = at
    return env


_ENV = _environment()


def wants_json(request: Request) -> bool:
    """``?format=json``: the document the matching command prints with ``--json``."""
    return request.query_params.get("format") == "json"


def page(request: Request, template: str, status: int = 200,
         headers: dict[str, str] | None = None, **context: Any) -> HTMLResponse:
    """One page of ``templates/``, with what every page's frame needs."""
    html = _ENV.get_template(template).render(request=request, path=request.url.path,
                                              **context)
    return HTMLResponse(html, status, headers=headers)


def document(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """JSON exactly as ``outbox ... --json`` prints it (indented, times as RFC 3339)."""
    body = json.dumps(value, indent=2, default=str) + "\n"
    return Response(body, status, headers=headers, media_type="application/json")


def problem(request: Request, status: int, message: str) -> Response:
    """An error as a page, or as ``{"error": ...}`` for a script."""
    if wants_json(request):
        return document({"error": message}, status)
    return page(request, "problem.html", status, message=message, code=status)
