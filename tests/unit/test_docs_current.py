"""Docs that name a version or number their steps stay true as the schema and releases move."""

from __future__ import annotations

import re
from pathlib import Path

from outbox.sql import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_upgrading_names_the_current_schema_version_only_in_its_table() -> None:
    """docs/upgrading.md's table of steps ends at the packaged schema version, and no prose
    states a current version that could go stale."""
    text = (ROOT / "docs" / "upgrading.md").read_text()
    steps = [int(n) for n in re.findall(r"^\| (\d+) \|", text, re.MULTILINE)]
    assert steps, "no table of steps"
    assert steps[-1] == SCHEMA_VERSION, steps
    assert steps == sorted(steps)
    assert not re.search(r"current (schema )?version \(?\d", text)


def test_the_kubernetes_steps_are_numbered_in_order() -> None:
    """deploy/README.md's numbered steps of a list count 1, 2, 3... without a repeat."""
    text = (ROOT / "deploy" / "README.md").read_text()
    for block in re.split(r"\n\s*\n(?=\S)(?!\d+\. )", text):
        numbers = [int(n) for n in re.findall(r"^(\d+)\. ", block, re.MULTILINE)]
        assert numbers == list(range(1, len(numbers) + 1)), numbers
