"""SQL text of the project, loaded once from the ``.sql`` files beside this module.

Every query lives in ``queries/*.sql`` as a named block::

    -- name: claim_batch
    -- Why this query looks the way it does.
    WITH locked AS (...) UPDATE ...

and call sites read ``queries["claim_batch"]``. Keeping SQL in files (rather than
f-strings spread over methods) lets a reader review every statement the project
runs in one place; nothing is ever formatted into this text at run time.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def _parse(text: str, source: str) -> dict[str, LiteralString]:
    """Split one file into its named blocks; a name defined twice is a bug."""
    found: dict[str, LiteralString] = {}
    pieces = _NAME.split(text)
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        if name in found:
            raise RuntimeError(f"query {name!r} defined twice in {source}")
        found[name] = cast(LiteralString, body.strip())
    return found


def _load() -> dict[str, LiteralString]:
    loaded: dict[str, LiteralString] = {}
    folder = resources.files(__package__).joinpath("queries")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in _parse(entry.read_text("utf-8"), entry.name).items():
            if name in loaded:
                raise RuntimeError(f"query {name!r} defined in two files")
            loaded[name] = body
    return loaded


def schema_text() -> str:
    """The packaged schema.sql (the root copy is kept identical by a test)."""
    return resources.files(__package__).joinpath("schema.sql").read_text("utf-8")


def migrations() -> list[tuple[int, str]]:
    """Numbered upgrade steps after version 1, as (version, sql), in order."""
    steps: list[tuple[int, str]] = []
    folder = resources.files(__package__).joinpath("migrations")
    for entry in folder.iterdir():
        match = re.match(r"^(\d+)_.*\.sql$", entry.name)
        if match:
            steps.append((int(match.group(1)), entry.read_text("utf-8")))
    return sorted(steps)


queries: dict[str, LiteralString] = _load()

__all__ = ["migrations", "queries", "schema_text"]
