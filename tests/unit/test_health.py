"""Heartbeat: the liveness check behind /healthz."""

from __future__ import annotations

from dispatcher.control import Heartbeat


def test_heartbeat_is_alive_until_beats_stop_for_longer_than_timeout() -> None:
    """alive() holds from the start and while beats come within the timeout, then fails."""
    now = [0.0]
    heart = Heartbeat(timeout=30.0, clock=lambda: now[0])
    assert heart.alive()
    now[0] = 30.0
    assert heart.alive()
    heart.beat()
    now[0] = 59.0
    assert heart.alive()
    now[0] = 61.0
    assert not heart.alive()
    heart.beat()
    assert heart.alive()
