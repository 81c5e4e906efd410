"""Message text: one line of an exception; counted nouns (\"1 attempt\", \"2 attempts\");
text from the database made safe for a terminal."""

from __future__ import annotations

from typing import Final

UNPRINTABLE: Final = frozenset((
    *range(0x20), 0x7F, *range(0x80, 0xA0),  # C0 controls (tab and newline too), DEL, C1
    0x061C, 0x200E, 0x200F,  # the Arabic letter mark, left-to-right and right-to-left marks
    *range(0x202A, 0x202F), *range(0x2066, 0x206A),  # bidi embeddings, overrides, isolates
))
"""Characters a terminal acts on instead of showing: colours, cursor moves, a title, a
line rewritten, text shown in another order than it is."""
_ESCAPED: Final = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in UNPRINTABLE}


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one: 1 delivery, 2 deliveries."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def printable(text: str) -> str:
    """``text`` with each of :data:`UNPRINTABLE` written as a visible escape (``\\x1b``,
    ``\\u202e``).

    For what the commands print from the database: rows a role with write
    access may have forged (a ``last_error`` that clears the screen, a type
    that reverses the rest of its line) are shown, not obeyed, and the escape
    tells the reader that something odd is stored there.
    """
    return text.translate(_ESCAPED)
