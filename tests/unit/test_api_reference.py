"""docs/api.md is what outbox._reference generates from the public modules' docstrings."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

import outbox
import outbox.endpoints
from outbox import _reference

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_is_the_generated_text() -> None:
    """The checked-in reference equals a fresh rendering, so no public name goes undocumented."""
    page = ROOT / _reference.PAGE
    assert page.read_text(encoding="utf-8") == _reference.render(), (
        f"{_reference.PAGE} is out of date with the code: run `./dev docs` "
        "(python -m outbox._reference docs/api.md) and commit the result")


def test_every_public_name_and_exception_has_an_entry() -> None:
    """Each name of the public modules' __all__ and every exception the package raises."""
    text = _reference.render()
    for name in outbox.__all__:
        if not name.startswith("__") and name not in _reference._ERRORS:
            assert f"### `outbox.{name}`" in text, name
    for name in ("PayloadTooLarge", "BacklogFull", "InvalidSignature", "EndpointExists"):
        assert f"### `outbox.errors.{name}`" in text, name
    assert "### `outbox.receive.first_time`" in text
    assert "### `outbox.testing.Receiver`" in text
    for name in outbox.endpoints.__all__:
        if not name[0].isupper():  # the errors are under outbox.errors
            assert f"### `outbox.endpoints.{name}`" in text, name
    assert "### `outbox.endpoints.EndpointSpec`" not in text


def test_a_public_name_without_a_docstring_stops_the_generator() -> None:
    """A function made public without its docstring cannot reach the page undocumented."""
    module = ModuleType("fake")

    def bare() -> None:
        pass

    module.bare = bare  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"fake\.bare has no docstring"):
        _reference._entry(module, "bare")
