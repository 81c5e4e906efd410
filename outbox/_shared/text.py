"""Message text: one line of an exception; counted nouns (\"1 attempt\", \"2 attempts\")."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one: 1 delivery, 2 deliveries."""
    return f"{n} {one if n == 1 else (many or one + 's')}"
