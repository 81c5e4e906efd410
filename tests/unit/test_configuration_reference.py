"""docs/configuration.md is what dispatcher.reference generates from the configuration objects."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from dispatcher import reference
from dispatcher.cli import build_parser, sources
from dispatcher.config import DispatcherConfig
from outbox.endpoints import EndpointSpec

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_is_the_generated_text() -> None:
    """The checked-in reference equals a fresh rendering, so no setting goes undocumented."""
    page = ROOT / reference.PAGE
    assert page.read_text(encoding="utf-8") == reference.render(), (
        f"{reference.PAGE} is out of date with the code: run `./dev docs` "
        "(python -m dispatcher.reference docs/configuration.md) and commit the result")


def test_every_setting_and_option_has_a_row() -> None:
    """Each DispatcherConfig field and each EndpointSpec option (the name aside) is listed."""
    text = reference.render()
    for item in dataclasses.fields(DispatcherConfig):
        assert f"| `{item.name}` |" in text, item.name
    for item in dataclasses.fields(EndpointSpec):
        if item.name != "name":
            assert f"| `{item.name}` |" in text, item.name


def test_sources_name_every_option_and_variable() -> None:
    """Every option of the parser sets a field, and the variables are those the CLI reads."""
    found = sources()
    assert set(found) == {f.name for f in dataclasses.fields(DispatcherConfig)}
    options = {a.option_strings[0] for a in build_parser()._actions
               if a.dest not in ("help", "version")}
    assert {option for option, _ in found.values() if option} == options
    assert found["dsn"] == ("--dsn", "OUTBOX_DSN")
    assert found["allow_networks"] == ("--allow-network", "OUTBOX_ALLOW_NETWORK")
    assert found["metrics_port"] == ("--metrics-port", "OUTBOX_METRICS_PORT")
    assert found["traces_exporter"] == (None, "OTEL_TRACES_EXPORTER")
    assert found["environ"] == (None, None)


@pytest.mark.parametrize(("value", "text"), [
    (None, "none"), ("", "none"), ((), "none"), ({}, "none"), (False, "off"), (True, "on"),
    (timedelta(days=7), "`7d`"), (timedelta(hours=12), "`12h`"), (timedelta(seconds=90), "`90s`"),
    (2.0, "`2`"), (0.5, "`0.5`"), (("*",), "`*`"), ("text", "`text`"),
])
def test_defaults_are_shown_as_a_reader_writes_them(value: object, text: str) -> None:
    """Durations as 7d, whole seconds without a decimal point, nothing as none."""
    assert reference.shown(value) == text


def test_a_field_without_a_docstring_stops_the_generator() -> None:
    """A setting added without its docstring cannot reach the reference undocumented."""

    @dataclasses.dataclass
    class Half:
        documented: int = 1
        """Says what it is."""
        bare: int = 2

    assert reference.field_docs(Half) == {"documented": "Says what it is."}
    with pytest.raises(ValueError, match="bare"):
        reference._documented(Half)
