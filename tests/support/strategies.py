"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

ANY_CHAR = st.one_of(st.characters(exclude_categories=()), st.characters(categories=["Cs"]))
"""Any code point, control characters and lone surrogates included (characters() leaves
surrogates out unless they are asked for by name)."""


def any_text(chars: st.SearchStrategy[str] = ANY_CHAR, *, min_size: int = 0,
             max_size: int = 20) -> st.SearchStrategy[str]:
    """Text of these characters, lone surrogates kept (st.text drops them whatever its alphabet)."""
    return st.lists(chars, min_size=min_size, max_size=max_size).map("".join)
