"""Error text: one line of an exception, for messages that must stay one line."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
