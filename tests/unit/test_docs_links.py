"""Every relative link of the documentation resolves: to a file, and to a heading in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "RELIABILITY.md", ROOT / "BENCHMARKS.md",
                ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def prose_lines(markdown: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped,
    spaces to '-'."""
    text = title.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor the headings of ``markdown`` get, repeated titles numbered as GitHub does."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(markdown):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = anchor(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(markdown: str) -> list[str]:
    """The targets of the inline links and images outside code."""
    targets = []
    for line in prose_lines(markdown):
        targets += _LINK.findall(_CODE_SPAN.sub("", line))
    return targets


def test_github_anchor_rules() -> None:
    """The rules the checker applies are GitHub's, on the headings our pages use."""
    assert anchor("Backpressure: `--max-pending`") == "backpressure---max-pending"
    assert anchor("Guarantees, in short") == "guarantees-in-short"
    assert anchor("The receiver's database") == "the-receivers-database"
    assert anchor("OutboxDispatcherDown") == "outboxdispatcherdown"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}
    assert links("[x](a.md#b) `[y](c.md)` ![i](img.png) [w](https://example.com)") == [
        "a.md#b", "img.png", "https://example.com"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Each relative link names an existing file, and its #anchor a heading of that page."""
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if _EXTERNAL.match(target):
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and \
                fragment not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{fragment} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    """A newcomer reaches every page of docs/ from the README's table of contents."""
    linked = {(ROOT / target.partition("#")[0]).resolve()
              for target in links((ROOT / "README.md").read_text(encoding="utf-8"))
              if not _EXTERNAL.match(target)}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"
