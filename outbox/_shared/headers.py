"""Custom HTTP headers: what a valid one looks like, and which names are the dispatcher's.

One definition for ``publish(headers=...)``, endpoint ``--header`` options,
and the dispatcher, which drops any reserved name that reaches it anyway
(rows written before a rule existed, or by hand).
"""

from __future__ import annotations

import re

HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token
VALUE_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab is fine in a value
MAX_VALUE = 8192
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
