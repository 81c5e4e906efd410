"""Which member of a fleet serves which database: rendezvous (highest random weight) hashing.

Pure. Every member computes the same answer from the same list of members
and databases, with nothing to agree on but the list: each database goes to
the member whose hash of (member, database) is highest. When a member joins
or leaves, only the databases it wins or held move (about 1/N of them),
where a hash ring or a modulo would move more or need virtual nodes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def weight(member: str, database: str) -> int:
    """The member's weight for the database: 64 bits of a keyed-free, stable hash."""
    digest = hashlib.blake2b(f"{member}\x00{database}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(database: str, members: Iterable[str]) -> str | None:
    """The member that serves the database; None with no member at all."""
    return max(members, key=lambda member: (weight(member, database), member), default=None)


def owned(databases: Iterable[str], members: Iterable[str], me: str) -> set[str]:
    """The databases ``me`` serves among ``members`` (``me`` counts as one of them)."""
    everyone = {*members, me}
    return {name for name in databases if owner(name, everyone) == me}
