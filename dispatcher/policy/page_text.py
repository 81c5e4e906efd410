"""The text of an error page, for ``last_error``: what a person reads on it, not its markup.

Proxies and frameworks answer errors with HTML (nginx's ``413 Request Entity
Too Large`` page, a load balancer's 502); their markup would fill the
stored error with tags. The stdlib's ``html.parser`` reads the page's start
(the body excerpt, a few KiB at most, so the work is bounded): the text
outside ``<head>``, ``<script>`` and ``<style>``, entities decoded, runs of
whitespace made one space; the title when the body has no text. It is never
strict: a page cut off at the excerpt's end, or not HTML at all, still
gives its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Final

_HIDDEN: Final = frozenset({"head", "script", "style", "template", "noscript"})
_STARTS: Final = ("<!doctype html", "<html", "<head", "<body", "<title")


def looks_like_html(body: str, headers: Mapping[str, str]) -> bool:
    """Whether the answer is an HTML page: said so by its type, or by its first tag."""
    if "html" in headers.get("content-type", "").lower():
        return True
    return body.lstrip()[:16].lower().startswith(_STARTS)


def page_text(html: str) -> str:
    """The readable text of ``html``, on one line; its title if its body has none."""
    reader = _Reader()
    try:
        reader.feed(html)
        reader.close()
    except AssertionError:  # html.parser's own complaint about broken markup
        pass
    text = " ".join(" ".join(reader.text).split())
    return text or " ".join(" ".join(reader.title).split())


class _Reader(HTMLParser):
    """Collects text outside hidden elements, a space at each tag (block or not)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.title: list[str] = []
        self._hidden = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self._hidden += 1
        elif tag == "title":
            self._in_title = True

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._hidden:
            self.text.append(data)
