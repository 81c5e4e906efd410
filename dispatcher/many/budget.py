"""The connection budget: at most ``--max-connections`` to the database servers at once.

A count, not a pool: each part takes the connections it is about to open
and gives them back once they are closed. A database served with pinned
connections takes :data:`SITE_COST` at once for as long as it keeps them; a
short look (``probe``) takes one while it lasts, and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from dispatcher.config import SITE_CONNECTIONS

SITE_COST = SITE_CONNECTIONS
"""What a database served with pinned connections holds at most: claim, complete,
maintenance, listener, and one of the short-lived ones its upkeep opens now and then
(the listener's round trip, retention)."""
HELD = 1
"""Held by the process beside its databases: the membership session."""
KEEP = 1
"""Left free by what is held for long (pinned databases, the hint's sessions): the short
looks must always get a connection, or a database with work would never be found."""


class Budget:
    """How many connections may still be opened."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Condition()

    def take(self, count: int, *, keep: int = 0) -> bool:
        """Take ``count`` if they are free now, and ``keep`` more would still be."""
        if self.used + count + keep > self.limit:
            return False
        self.used += count
        return True

    async def give(self, count: int) -> None:
        """Give back what was taken (the connections are closed)."""
        self.give_now(count)
        async with self._freed:
            self._freed.notify_all()

    def give_now(self, count: int) -> None:
        """Give back at once, for a caller that cannot wait: ``take`` sees it now; the
        looks waiting for a connection hear of it at the next ``give`` (or
        :meth:`wake_waiters`)."""
        self.used = max(0, self.used - count)

    async def wake_waiters(self) -> None:
        async with self._freed:
            self._freed.notify_all()

    @contextlib.asynccontextmanager
    async def one(self) -> AsyncIterator[None]:
        """One connection for a short look, waited for while the budget is full."""
        async with self._freed:
            await self._freed.wait_for(lambda: self.take(1))
        try:
            yield
        finally:
            await self.give(1)
