"""Attempt spans are made only when OTEL_TRACES_EXPORTER names an installed exporter."""

from __future__ import annotations

import logging

import pytest

from dispatcher.observe.tracing import Tracing, configure

pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed")


@pytest.mark.parametrize("names", ["", "none", " , ", "None"])
def test_no_exporter_named_no_tracing(names: str) -> None:
    """Unset, empty or none: no spans."""
    assert configure(names, "1") is None


def test_an_unknown_exporter_is_said_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """An exporter no installed package provides is named in a warning; none left: no spans."""
    with caplog.at_level(logging.WARNING):
        assert configure("no-such-exporter", "1") is None
    assert "no-such-exporter" in caplog.text


def test_console_exporter_makes_tracing() -> None:
    """The SDK's console exporter, found by its entry point, makes attempt spans."""
    tracing = configure("console", "1")
    assert isinstance(tracing, Tracing)
    tracing.shutdown()
