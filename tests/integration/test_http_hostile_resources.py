"""Hostile conditions that aim at the process's resources, built for real on 127.0.0.1.

A DNS answer of 100 addresses leading to a listener that never accepts; DNS
servers that stall for many names at once; a process out of file
descriptors. Each test measures what the process holds (its descriptors,
its lookup threads) while the condition lasts, and checks that a healthy
endpoint keeps being served beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from dispatcher.http.dial import ADDRESSES_PER_FAMILY, ATTEMPTS_RACING, DialLimit
from dispatcher.http.resolve import AddrInfo, HostResolver
from dispatcher.http.transport import H1Transport
from dispatcher.limits import circuit
from dispatcher.observe.resources import quiet_resource_errors, raise_open_files_limit
from dispatcher.policy.model import AttemptResult
from dispatcher.policy.outcome import classify
from tests.support.raw_http import DEADLINE, HANG_GUARD, OK, answering, raw_server, run_for, sender


def open_files() -> int:
    """Descriptors this process holds (the listing's own, open while listing, left out)."""
    return len(os.listdir("/proc/self/fd")) - 1


@contextlib.contextmanager
def never_accepting() -> Iterator[int]:
    """A listener on 127.0.0.1 that never accepts, its queue already full: connects hang."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):  # fill the accept queue (backlog 0 holds one or two)
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.2)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def hundred_addresses(silent_port: int) -> Any:
    """A resolver that answers 100 addresses for evil.test, all silent; 127.0.0.1 else."""
    async def resolve(host: str, port: int) -> list[AddrInfo]:
        if host == "evil.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", silent_port))] * 100
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
    return resolve


@contextlib.asynccontextmanager
async def sampling(every: float = 0.02) -> AsyncIterator[list[int]]:
    """The process's open descriptors, sampled while the block runs: [baseline, peak]."""
    found = [open_files(), 0]

    async def sample() -> None:
        while True:
            found[1] = max(found[1], open_files())
            await asyncio.sleep(every)
    task = asyncio.create_task(sample())
    try:
        yield found
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- a DNS answer of 100 silent addresses -------------------------------------------------

def test_hundred_silent_addresses_hold_few_descriptors_and_spare_a_healthy_endpoint() -> None:
    """16 sends to a name of 100 silent addresses hold 2 sockets each, not one per 250 ms,
    and a healthy endpoint's requests all succeed meanwhile."""
    sends, timeout = 16, 3.0  # unbounded: 12 attempts each by the deadline, 192 sockets

    async def main() -> tuple[list[AttemptResult], list[AttemptResult], list[int], int]:
        with never_accepting() as silent:
            transport = H1Transport(max_connections=100, resolver=hundred_addresses(silent))
            async with raw_server(answering(OK)) as good, sender(transport=transport) as client, \
                    sampling() as files:
                hostile = asyncio.gather(*(client.send(f"http://evil.test:{silent}/", [],
                                                       b"{}", timeout) for _ in range(sends)))
                await asyncio.sleep(1.0)  # the race well under way
                healthy = [await client.send(f"http://good.test:{good.port}/", [], b"{}",
                                             DEADLINE) for _ in range(10)]
                stalled = list(await hostile)
            return stalled, healthy, files, transport.dials.in_flight
    stalled, healthy, (baseline, peak), left = run_for(main)
    assert {(r.status, r.error_kind) for r in stalled} == {(None, "timeout")}
    assert [r.status for r in healthy] == [200] * 10
    # The sockets racing, the healthy endpoint's connection and a little slack.
    assert peak - baseline <= sends * ATTEMPTS_RACING + 8, (baseline, peak)
    assert left == 0  # every dial ended with its attempt


def test_only_the_first_addresses_of_a_family_are_tried() -> None:
    """Of 100 refusing addresses, ADDRESSES_PER_FAMILY are tried before the attempt fails."""
    tried: list[int] = []
    refusing = socket.socket()
    refusing.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    closed_port = refusing.getsockname()[1]

    async def resolve(host: str, port: int) -> list[AddrInfo]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", closed_port))] * 100

    class Counting(DialLimit):
        async def dial(self, info: AddrInfo) -> socket.socket:
            tried.append(info[4][1])
            return await super().dial(info)

    async def main() -> AttemptResult:
        transport = H1Transport(resolver=resolve)
        transport.dials = Counting()
        async with sender(transport=transport) as client:
            return await client.send(f"http://many.test:{closed_port}/", [], b"{}", DEADLINE)
    try:
        result = run_for(main)
    finally:
        refusing.close()
    assert (result.status, result.error_kind) == (None, "connect")
    assert len(tried) == ADDRESSES_PER_FAMILY


def test_the_ceiling_bounds_dials_in_flight_for_the_whole_transport() -> None:
    """With a ceiling of 4, twelve sends to silent addresses never connect more than 4
    sockets at once."""
    async def main() -> tuple[list[AttemptResult], int]:
        with never_accepting() as silent:
            transport = H1Transport(resolver=hundred_addresses(silent))
            transport.dials = DialLimit(4)
            peak = 0
            async with sender(transport=transport) as client:
                sends = asyncio.gather(*(client.send(f"http://evil.test:{silent}/", [], b"{}",
                                                     1.5) for _ in range(12)))
                while not sends.done():
                    peak = max(peak, transport.dials.in_flight)
                    await asyncio.sleep(0.01)
                return list(await sends), peak
    results, peak = run_for(main)
    assert {r.error_kind for r in results} == {"timeout"}
    assert peak == 4


# -- DNS servers stalling for many names ------------------------------------------------------

def test_stalling_names_of_many_domains_hold_up_no_healthy_lookup() -> None:
    """Twelve stalling names of twelve domains and ten of one more: a healthy lookup still
    answers at once, and the one domain with ten names held two threads."""
    release = threading.Event()
    asked: list[str] = []

    def lookup(host: str) -> list[AddrInfo]:
        asked.append(host)
        if host != "good.test":
            release.wait(HANG_GUARD)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
    resolver = HostResolver(lookup, stalled_after=0.2)

    async def main() -> tuple[list[AddrInfo], float, int]:
        names = [f"s.evil{i}.test" for i in range(12)] + [f"n{i}.one.test" for i in range(10)]
        stalled = [asyncio.create_task(resolver(name, 80)) for name in names]
        for _ in range(300):  # until every lookup that may start has (3 s at most)
            if resolver.threads_in_use() >= 12 + 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # and has stalled: no other would start now
        started = time.monotonic()
        good = await asyncio.wait_for(resolver("good.test", 443), 5)
        took = time.monotonic() - started
        in_use = resolver.threads_in_use()
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)
        return good, took, in_use
    try:
        good, took, in_use = run_for(main)
    finally:
        release.set()
        resolver.close()
    assert [info[4] for info in good] == [("127.0.0.1", 443)]
    assert took < 1.0
    assert len([name for name in asked if name.endswith(".one.test")]) == 2
    assert in_use == 12 + 2  # the stalled ones; their waiters gave up, the threads wait on


def test_a_lookup_nobody_waits_for_any_more_is_not_started() -> None:
    """Names queued behind a busy domain whose waiters gave up never reach a thread."""
    release = threading.Event()
    asked: list[str] = []

    def lookup(host: str) -> list[AddrInfo]:
        asked.append(host)
        release.wait(HANG_GUARD)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
    resolver = HostResolver(lookup, stalled_after=0.1)

    async def main() -> None:
        for i in range(6):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(resolver(f"n{i}.one.test", 80), 0.05)
        await asyncio.sleep(0.3)
    try:
        run_for(main)
    finally:
        release.set()
        resolver.close()
    assert asked == ["n0.one.test", "n1.one.test"]


# -- out of file descriptors ------------------------------------------------------------------

def lowest_free_descriptor() -> int:
    probe = os.open(os.devnull, os.O_RDONLY)  # a new descriptor takes the lowest free number
    os.close(probe)
    return probe


@contextlib.contextmanager
def no_descriptor_left(spare: int = 0) -> Iterator[None]:
    """This process's soft RLIMIT_NOFILE lowered so that the descriptor after ``spare`` more
    fails: a new one takes the lowest free number, and the limit is set from it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free_descriptor() + spare, hard))
    except (OSError, ValueError) as exc:
        pytest.skip(f"cannot lower the open files limit here: {exc}")
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_no_descriptor_left_is_an_internal_error_not_the_endpoints_failure() -> None:
    """Out of descriptors, a POST to a healthy endpoint fails as ``internal``: retried,
    reason ``other``, no circuit vote, and it succeeds once descriptors are free again."""
    async def main() -> tuple[AttemptResult, AttemptResult]:
        async with raw_server(answering(OK)) as good, sender() as client:
            with no_descriptor_left():
                starved = await client.send(good.url, [], b"{}", 5.0)
            return starved, await client.send(good.url, [], b"{}", DEADLINE)
    starved, after = run_for(main)
    assert (starved.status, starved.error_kind) == (None, "internal"), starved
    assert "internal error in the dispatcher" in starved.error
    assert circuit.verdict(starved) is None
    outcome = classify(starved, 1, 5, datetime.now(UTC))
    assert (outcome.action, outcome.reason) == ("retry", "other")
    assert after.status == 200


def test_accept_out_of_descriptors_is_logged_once_a_while(
        caplog: pytest.LogCaptureFixture) -> None:
    """A client knocking for 2.5 s at a listener that has no descriptor left to accept it:
    asyncio reports each retry (one a second), the dispatcher's handler logs one line."""
    async def main() -> int:
        throttle = quiet_resource_errors(asyncio.get_running_loop(), interval=60)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with no_descriptor_left(spare=1):
                client = socket.socket()  # the one spare descriptor: accept gets none
                try:
                    client.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        client.connect(("127.0.0.1", port))
                    await asyncio.sleep(2.5)
                finally:
                    client.close()
        finally:
            server.close()
        return throttle.suppressed
    with caplog.at_level(logging.WARNING, logger="dispatcher"):
        suppressed = run_for(main)
    lines = [r for r in caplog.records if "out of system resource" in r.getMessage()]
    assert len(lines) == 1
    assert suppressed >= 1  # reported again, and left out of the log


def test_soft_open_files_limit_is_raised_to_the_hard_one() -> None:
    """At start the soft limit goes up to the hard one (or stays, saying why, if refused)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))
        except (OSError, ValueError) as exc:
            pytest.skip(f"cannot lower the open files limit here: {exc}")
        now_soft, now_hard = raise_open_files_limit()
        assert (now_soft, now_hard) == resource.getrlimit(resource.RLIMIT_NOFILE)
        assert now_soft == (hard if hard != resource.RLIM_INFINITY else now_soft)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_refused_limit_change_is_logged_and_harmless(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Where setrlimit is refused (a container runtime may), the dispatcher runs on."""
    def refuse(*_: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    with caplog.at_level(logging.WARNING, logger="dispatcher"):
        assert raise_open_files_limit() == (256, 4096)
    assert "could not raise the open files limit from 256 to 4096" in caplog.text
