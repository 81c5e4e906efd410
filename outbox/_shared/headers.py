"""Custom HTTP headers: what a valid one looks like, and which names are the dispatcher's.

One definition for ``publish(headers=...)``, endpoint ``--header`` options,
and the dispatcher, which drops any reserved name that reaches it anyway
(rows written before a rule existed, or by hand).
"""

from __future__ import annotations

import re

HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token
MAX_VALUE = 8192
# RFC 9110 field values are visible ASCII, spaces and tabs: a value travels as
# it is, and the dispatcher cannot send anything else, so it would fail every
# attempt until dead. Obsolete non-ASCII text (obs-text) is not allowed either.
_NOT_PRINTABLE = re.compile(r"[^\t\x20-\x7e]")
# Headers the dispatcher writes itself, or that steer the HTTP framing: letting
# anyone else set them would forge the envelope or break the connection.
RESERVED = frozenset(
    {"content-type", "content-length", "content-encoding", "host", "connection",
     "transfer-encoding", "te", "upgrade", "keep-alive", "proxy-connection", "trailer",
     "expect"}
)
RESERVED_PREFIXES = ("webhook-", "ce-")


def is_reserved(lowered_name: str) -> bool:
    """True for a (lower-case) header name only the dispatcher may write."""
    return lowered_name in RESERVED or lowered_name.startswith(RESERVED_PREFIXES)


def value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as a header value, or None when it can.

    The text follows the header's name in both callers' messages. It names
    the offending character by code point and position, never the value: a
    header value is often a credential.
    """
    if len(value) > MAX_VALUE:
        return f"is longer than {MAX_VALUE} characters"
    bad = _NOT_PRINTABLE.search(value)
    if bad is None:
        return None
    char = bad.group()
    if char in "\r\n":
        return "must not contain line breaks (CR, LF)"
    if char < " " or char == "\x7f":
        return "must not contain control characters"
    return (f"must be printable ASCII (letters, digits, punctuation, spaces, tabs); "
            f"character {bad.start() + 1} is U+{ord(char):04X}")
