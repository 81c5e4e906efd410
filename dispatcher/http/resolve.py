"""Host name lookups for new connections: threads of their own, one per host name at a time.

``getaddrinfo`` blocks, so it runs in a thread. asyncio's default executor
is shared by the whole process (six threads on two cores): a DNS server
stalling on one endpoint's name filled it, and every other endpoint's new
connections (and anything else using that executor) waited behind it.

Here lookups have a bounded pool of their own, and concurrent lookups of
one host name share one thread: a name that stalls holds a single thread
however many deliveries wait for it, and the other names go through the
rest. A wait is bounded by the attempt's deadline; a waiter that gives up
leaves the shared lookup running for the others and for later attempts
(a thread in ``getaddrinfo`` cannot be interrupted; it ends with the system
resolver's own timeout). Nothing is cached: keep-alive makes lookups rare,
and a record's TTL is the system resolver's business.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]  # as getaddrinfo returns them
Resolver = Callable[[str, int], Awaitable[list[AddrInfo]]]  # what dial uses
Lookup = Callable[[str], Sequence[AddrInfo]]  # blocking, port-less (the port is set after)

LOOKUP_THREADS = 8


def system_lookup(host: str) -> Sequence[AddrInfo]:
    """The operating system's addresses for ``host`` (blocking)."""
    return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)


class HostResolver:
    """An async resolver over a blocking lookup: bounded threads, concurrent lookups shared."""

    def __init__(self, lookup: Lookup = system_lookup, *, threads: int = LOOKUP_THREADS) -> None:
        """``lookup`` replaces the system's (tests); ``threads`` bounds the lookups at once."""
        self._lookup = lookup
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[str, asyncio.Future[Sequence[AddrInfo]]] = {}

    async def __call__(self, host: str, port: int) -> list[AddrInfo]:
        """The addresses of ``host`` with ``port``; OSError (``gaierror``) if there are none."""
        pending = self._pending.get(host)
        if pending is None:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="lookup")
            pending = asyncio.get_running_loop().run_in_executor(
                self._executor, self._lookup, host)
            self._pending[host] = pending
            pending.add_done_callback(functools.partial(self._settled, host))
        # shield: a waiter cancelled by its deadline leaves the lookup to the others.
        infos = await asyncio.shield(pending)
        return [(family, kind, proto, name, (address[0], port, *address[2:]))
                for family, kind, proto, name, address in infos]

    def close(self) -> None:
        """Stop the threads once their lookups end; nothing waits for them here.

        Lookups not yet started are cancelled: close it when nothing waits any more.
        """
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _settled(self, host: str, future: asyncio.Future[Sequence[AddrInfo]]) -> None:
        if self._pending.get(host) is future:
            del self._pending[host]
        if not future.cancelled():
            future.exception()  # retrieved, even when every waiter had given up
