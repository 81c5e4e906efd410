"""A TCP server on an event loop of its own, in a daemon thread, used as a context manager.

The fault proxy and the hostile receiver both serve the dispatcher (a real
process) from inside a test that is not async itself: each needs a loop in a
thread, a server started on it and every connection task cancelled at the
end. This is that part once; subclasses say how to start serving and what to
undo before their tasks are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Self


class LoopServer:
    """``with Subclass(...) as server:`` starts its loop and server; leaving stops both."""

    def __init__(self, name: str) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=name)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def _start(self) -> None:
        """Start ``self._server`` on the loop and set ``self.port``."""
        raise NotImplementedError

    def _closing(self) -> None:
        """On the loop, after the server stops accepting and before its tasks are cancelled."""

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._closing()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
