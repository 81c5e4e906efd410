"""Durations as people write them on a command line: ``7d``, ``12h``, ``1h30m``, ``90s``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> timedelta:
    """Parse ``7d``, ``12h``, ``1h30m``, ``2.5s``, ``250ms`` or a bare number of seconds.

    Raises ValueError with a message fit for a user.
    """
    cleaned = text.strip().lower()
    try:
        seconds = float(cleaned)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(cleaned):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(cleaned) or not cleaned:
            raise ValueError(
                f"invalid duration {text!r}: use a number with a unit, such as 90s, 15m, 12h or 7d"
            ) from None
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"invalid duration {text!r}: must be a finite, non-negative time")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:  # past timedelta's range (999999999 days), such as "1e300"
        raise ValueError(f"invalid duration {text!r}: too long") from None
