"""Host name lookups for new connections: threads of their own, shared fairly between names.

``getaddrinfo`` blocks, so it runs in a thread. asyncio's default executor
is shared by the whole process (six threads on two cores): a DNS server
stalling on one endpoint's name filled it, and every other endpoint's new
connections (and anything else using that executor) waited behind it.

Here lookups have threads of their own, under three rules, so that names
whose DNS server stalls cannot hold up the others:

- concurrent lookups of one host name share one thread, however many
  deliveries wait for it;
- one domain (a host's last two labels, three under a short second level
  of a country code such as ``co.uk``) holds at most ``PER_DOMAIN``
  threads at once: whoever runs ``evil.example`` may give its endpoints
  any number of names, they take turns on two threads;
- ``LOOKUP_THREADS`` lookups run at once, plus one more for each lookup
  that has run longer than ``STALLED_AFTER`` seconds, up to
  ``MAX_LOOKUP_THREADS``: a stalled lookup does not take a thread from the
  healthy ones, and eight stalling names no longer stop every lookup.

A wait is bounded by the attempt's deadline; a waiter that gives up leaves
the shared lookup running for the others and for later attempts (a thread
in ``getaddrinfo`` cannot be interrupted; it ends with the system
resolver's own timeout), and a lookup still waiting for its turn when
nobody waits for it any more is not started. Nothing is cached: keep-alive
makes lookups rare, and a record's TTL is the system resolver's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]  # as getaddrinfo returns them
Resolver = Callable[[str, int], Awaitable[list[AddrInfo]]]  # what dial uses
Lookup = Callable[[str], Sequence[AddrInfo]]  # blocking, port-less (the port is set after)

LOOKUP_THREADS = 8
MAX_LOOKUP_THREADS = 32
PER_DOMAIN = 2
STALLED_AFTER = 1.0  # seconds: far beyond a healthy lookup, far below a resolver's timeout


def system_lookup(host: str) -> Sequence[AddrInfo]:
    """The operating system's addresses for ``host`` (blocking)."""
    return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)


def domain_of(host: str) -> str:
    """The part of a host name one owner controls, roughly: ``a.b.example.com`` ->
    ``example.com``, ``hooks.shop.co.uk`` -> ``shop.co.uk``."""
    labels = host.lower().rstrip(".").split(".")
    keep = 3 if len(labels) >= 3 and len(labels[-1]) == 2 and len(labels[-2]) <= 3 else 2
    return ".".join(labels[-keep:])


class _Lookup:
    """One host name's lookup: its result for every waiter, and how many still wait."""

    __slots__ = ("domain", "future", "started", "waiters")

    def __init__(self, host: str, future: asyncio.Future[Sequence[AddrInfo]]) -> None:
        self.domain = domain_of(host)
        self.future = future
        self.waiters = 0
        self.started: float | None = None  # monotonic time the thread took it


class HostResolver:
    """An async resolver over a blocking lookup: bounded, fair threads, lookups shared."""

    def __init__(self, lookup: Lookup = system_lookup, *, threads: int = LOOKUP_THREADS,
                 max_threads: int = MAX_LOOKUP_THREADS, per_domain: int = PER_DOMAIN,
                 stalled_after: float = STALLED_AFTER) -> None:
        """``lookup`` replaces the system's (tests); the rest are the rules of the module."""
        self._lookup = lookup
        self._threads = threads
        self._max_threads = max(threads, max_threads)
        self._per_domain = per_domain
        self._stalled_after = stalled_after
        self._executor: ThreadPoolExecutor | None = None
        self._lookups: dict[str, _Lookup] = {}
        self._running: set[_Lookup] = set()
        self._turn: asyncio.Future[None] | None = None  # resolved when a thread frees up
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, host: str, port: int) -> list[AddrInfo]:
        """The addresses of ``host`` with ``port``; OSError (``gaierror``) if there are none."""
        entry = self._lookups.get(host)
        if entry is None:
            loop = asyncio.get_running_loop()
            entry = self._lookups[host] = _Lookup(host, loop.create_future())
            task = loop.create_task(self._run(host, entry))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        entry.waiters += 1
        try:
            # shield: a waiter cancelled by its deadline leaves the lookup to the others.
            infos = await asyncio.shield(entry.future)
        finally:
            entry.waiters -= 1
        return [(family, kind, proto, name, (address[0], port, *address[2:]))
                for family, kind, proto, name, address in infos]

    def threads_in_use(self) -> int:
        """Lookups running in a thread now (for tests)."""
        return len(self._running)

    def close(self) -> None:
        """Stop the threads once their lookups end; nothing waits for them here.

        Lookups not yet started are cancelled: close it when nothing waits any more.
        """
        for task in list(self._tasks):
            with contextlib.suppress(RuntimeError):  # its loop already closed
                task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def _run(self, host: str, entry: _Lookup) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._may_start(entry):
                await self._next_turn()
                if entry.waiters == 0:  # everyone gave up while it waited for its turn
                    raise OSError(f"lookup of {host} abandoned")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._max_threads,
                                                    thread_name_prefix="lookup")
            entry.started = time.monotonic()
            self._running.add(entry)
            try:
                infos = await loop.run_in_executor(self._executor, self._lookup, host)
            finally:
                self._running.discard(entry)
                self._wake()
        except asyncio.CancelledError:
            entry.future.cancel()
            raise
        except Exception as exc:  # handed to every waiter
            entry.future.set_exception(exc)
        else:
            entry.future.set_result(infos)
        finally:
            if self._lookups.get(host) is entry:
                del self._lookups[host]
            if not entry.future.cancelled():
                entry.future.exception()  # retrieved, even when every waiter had given up

    def _may_start(self, entry: _Lookup) -> bool:
        """Whether a thread is free for ``entry`` under the rules of the module."""
        now = time.monotonic()
        stalled = sum(1 for e in self._running
                      if e.started is not None and now - e.started >= self._stalled_after)
        if len(self._running) >= min(self._max_threads, self._threads + stalled):
            return False
        return sum(1 for e in self._running if e.domain == entry.domain) < self._per_domain

    async def _next_turn(self) -> None:
        """Until a thread frees up, or a running lookup may have become stalled."""
        if self._turn is None or self._turn.done():
            self._turn = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._turn), self._stalled_after / 4)

    def _wake(self) -> None:
        if self._turn is not None and not self._turn.done():
            self._turn.set_result(None)
