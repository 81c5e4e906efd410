"""The sync file parser over generated TOML documents, and over files that are not TOML at all.

The promise (docs/concepts.md, "Endpoints"): an unreadable sync file is refused with
exit 2 and nothing changed, which the command gets from ``load_sync_file``
raising ``InvalidEndpoint``. Whatever the file holds (any structure, any
values, broken syntax, another encoding, deep nesting), the parser returns
the specs the file defines or raises ``InvalidEndpoint``, never anything
else; what it returns is what ``EndpointSpec.from_options`` makes of each
``[endpoints.NAME]`` table, and a file of good tables only is accepted.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from outbox.endpoints import EndpointSpec, load_sync_file
from outbox.errors import InvalidEndpoint
from tests.support.endpoint_options import (
    ENDPOINT_NAMES,
    Options,
    good_endpoint_name,
    options,
    toml_string,
    toml_value,
)

# Pure and fast; the file is rewritten in one temporary directory for every example.
PURE = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

_ODD_NAMES = st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=70),
                       st.sampled_from(["", "-x", ".x", "a" * 64, "a b", "é"]))


@dataclass(frozen=True)
class Document:
    """A sync file's text and what it was made from; ``good``: it must be accepted."""

    text: str
    tables: dict[str, Options] | None
    good: bool


def _render(top: dict[str, Any], tables: dict[str, dict[str, Any]] | None, *,
            sections: bool) -> str:
    """The document as TOML: endpoint tables as [endpoints.NAME] sections, or inline."""
    lines = [f"{toml_string(key)} = {toml_value(value)}" for key, value in top.items()]
    if tables is None:
        return "\n".join(lines) + "\n"
    if not sections or not tables:
        lines.append(f"endpoints = {toml_value(tables)}")
        return "\n".join(lines) + "\n"
    for name, values in tables.items():
        lines.append(f"\n[endpoints.{toml_string(name)}]")
        lines.extend(f"{toml_string(key)} = {toml_value(value)}" for key, value in values.items())
    return "\n".join(lines) + "\n"


@st.composite
def documents(draw: st.DrawFn) -> Document:
    """Endpoint tables of good or odd options, now and then in a document of the wrong shape."""
    if draw(st.booleans()):  # a file as an operator means it: every table good
        names = draw(st.lists(ENDPOINT_NAMES, max_size=3, unique=True))
        drawn = {name: draw(options(toml=True, good_only=True)) for name in names}
    else:
        names = draw(st.lists(st.one_of(ENDPOINT_NAMES, _ODD_NAMES), max_size=3, unique=True))
        drawn = {name: draw(options(toml=True)) for name in names}
    good = all(o.good and good_endpoint_name(name) for name, o in drawn.items())
    tables: dict[str, Any] | None = {name: o.values for name, o in drawn.items()}
    shape = draw(st.sampled_from(["sections", "inline", "extra key", "no endpoints",
                                  "endpoints not a table"]))
    if shape in ("extra key", "no endpoints", "endpoints not a table") and draw(st.booleans()):
        shape = "sections"  # the wrong shapes only now and then
    top: dict[str, Any] = {}
    if shape == "extra key":
        top[draw(st.text(max_size=10))] = draw(st.integers())
        good = False
    elif shape == "no endpoints":
        tables, good = None, False
    elif shape == "endpoints not a table":
        top["endpoints"] = draw(st.one_of(st.integers(), st.text(max_size=5),
                                          st.lists(st.integers(), max_size=2)))
        tables, good = None, False
    text = _render(top, tables, sections=shape != "inline")
    return Document(text, drawn if tables is not None else None, good)


@st.composite
def broken(draw: st.DrawFn) -> bytes:
    """Files that are not the TOML they look like: cut, spliced, re-encoded, nested, binary."""
    text = draw(documents()).text
    kind = draw(st.sampled_from(["cut", "splice", "latin-1", "nested", "bytes"]))
    if kind == "cut":
        start = draw(st.integers(0, len(text)))
        return (text[:start] + text[draw(st.integers(start, len(text))):]).encode()
    if kind == "splice":
        at = draw(st.integers(0, len(text)))
        junk = draw(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=5))
        return (text[:at] + junk + text[at:]).encode()
    if kind == "latin-1":  # a file saved in another encoding
        return ('[endpoints.caf\u00e9]\nurl = "https://caf\u00e9.example/"\n').encode("latin-1")
    if kind == "nested":  # deeper than the parser's recursion goes
        depth = draw(st.integers(1, 5000))
        value = draw(st.sampled_from(["[", "{a = "]))
        close = "]" if value == "[" else "}"
        inner = "1" if value != "[" else ""
        return f"endpoints = {{}}\nx = {value * depth}{inner}{close * depth}\n".encode()
    return draw(st.binary(max_size=200))


def _parse(path: Path, content: bytes) -> list[EndpointSpec] | InvalidEndpoint:
    path.write_bytes(content)
    try:
        return load_sync_file(path)
    except InvalidEndpoint as refused:
        return refused


@PURE
@given(document=documents())
def test_a_sync_file_gives_its_specs_or_invalid_endpoint(tmp_path: Path,
                                                         document: Document) -> None:
    """Any document: the specs from_options makes of its tables, or InvalidEndpoint."""
    result = _parse(tmp_path / "endpoints.toml", document.text.encode())
    if isinstance(result, InvalidEndpoint):
        event("refused")
        assert not document.good, f"a good file was refused: {result}"
        return
    event(f"{len(result)} endpoints")
    tables = tomllib.loads(document.text)["endpoints"]
    assert result == [EndpointSpec.from_options(name, values) for name, values in tables.items()]
    assert document.tables is not None
    assert [spec.name for spec in result] == list(document.tables)


@PURE
@given(content=broken())
def test_a_broken_file_is_refused_or_read_never_a_crash(tmp_path: Path, content: bytes) -> None:
    """Cut, spliced, re-encoded, deeply nested or binary files: specs or InvalidEndpoint."""
    result = _parse(tmp_path / "endpoints.toml", content)
    event("refused" if isinstance(result, InvalidEndpoint) else "read")
