"""--once's end, decided in one place (``once.OncePass``), without a database."""

from __future__ import annotations

from dispatcher.app import build
from dispatcher.config import DispatcherConfig
from dispatcher.once import OncePass


def _pass() -> OncePass:
    once = build(DispatcherConfig(dsn="host=unused", once=True)).once
    assert once is not None
    return once


def test_only_once_builds_a_pass() -> None:
    """A dispatcher that runs until stopped has no pass object."""
    assert build(DispatcherConfig(dsn="host=unused")).once is None


def test_the_pass_is_over_only_when_nothing_is_left_to_unblock() -> None:
    """More due, a rate-limit turn awaited, or a result written since: not over yet."""
    over = _pass().over
    assert over(more=True, throttled=False) is False
    assert over(more=False, throttled=True) is False
    assert over(more=False, throttled=False) is True


def test_a_result_written_since_the_last_claim_asks_for_one_more() -> None:
    """A result may free a key's next event or a slot: one more claim before the end."""
    parts = build(DispatcherConfig(dsn="host=unused", once=True))
    assert parts.once is not None
    parts.completer.written += 1  # as a write of one record does
    assert parts.once.over(more=False, throttled=False) is False
    assert parts.once.over(more=False, throttled=False) is True
