"""Argument types both commands take: text from a command line or a variable, checked.

``outbox`` and ``outbox-dispatcher`` read durations the same way
(``outbox.durations``), and say what is wrong with one in the same words:
argparse reports an ``ArgumentTypeError`` as a usage error naming the option,
and the dispatcher's environment reader names the variable before it.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from outbox.durations import parse_duration


def duration(text: str) -> timedelta:
    """A duration as people write it (``7d``, ``1h30m``, ``90s``, a bare number of seconds)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds(text: str) -> float:
    """:func:`duration`, as a number of seconds."""
    return duration(text).total_seconds()
