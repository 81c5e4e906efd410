"""Every relative link of the documentation resolves: to a file, and to a heading in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.markdown import EXTERNAL, anchor, anchors, links

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "RELIABILITY.md", ROOT / "BENCHMARKS.md",
                ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md")])

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
        if EXTERNAL.match(target):
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
              if not EXTERNAL.match(target)}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"
