"""CPU per request and requests/s of the HTTP clients the dispatcher could use.

    python benchmarks/http_client.py [--requests 4000] [--runs 5] [--only TEXT]...
                                     [--baseline DIR]

Small POSTs (a webhook-sized JSON body and signature headers), 16 in flight,
to the lean test receiver (``outbox.testing.Receiver``, not recording) running
in a child process, so that this process's CPU time is the client's alone.
Every client runs ``--runs`` times, interleaved, in the same process run;
the table shows medians. CPU per request = process CPU time / requests.
The aiohttp rows run when aiohttp (and httpx-aiohttp) are installed; they are
not dependencies of the project. The bare asyncio protocol row is the floor:
a fixed request and no parsing beyond finding the end of the head.

``--baseline DIR`` adds the ``HttpSender`` of another checkout (a directory
holding its ``dispatcher`` package, e.g. ``git archive REV dispatcher | tar
-x -C DIR``), loaded beside this tree's and measured in the same run,
interleaved with it: a change to the wire is then judged by a ratio taken
under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import httpx

from dispatcher.http.sender import HttpSender

IN_FLIGHT = 16
BODY = (b'{"id":"0190f1a2-7c3e-7d2a-9b1e-5f2a3c4d5e6f","type":"mail.received",'
        b'"timestamp":"2024-07-01T12:00:00Z","key":"thread-7","data":{"message_id":42}}')
HEADERS = [("content-type", "application/json"),
           ("webhook-id", "0190f1a2-7c3e-7d2a-9b1e-5f2a3c4d5e6f"),
           ("webhook-timestamp", "1719835200"),
           ("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")]

Post = Callable[[], Awaitable[None]]
Factory = Callable[[AsyncExitStack, str], Awaitable[Post]]


async def httpx_default(stack: AsyncExitStack, url: str) -> Post:
    client = await stack.enter_async_context(httpx.AsyncClient(
        limits=httpx.Limits(max_connections=IN_FLIGHT), trust_env=False))

    async def post() -> None:
        (await client.post(url, content=BODY, headers=HEADERS)).raise_for_status()
    return post


async def httpx_aiohttp_package(stack: AsyncExitStack, url: str) -> Post:
    from httpx_aiohttp import AiohttpTransport as PackageTransport  # optional, benchmark only

    client = await stack.enter_async_context(httpx.AsyncClient(
        transport=PackageTransport(), trust_env=False))

    async def post() -> None:
        (await client.post(url, content=BODY, headers=HEADERS)).raise_for_status()
    return post


async def aiohttp_alone(stack: AsyncExitStack, url: str) -> Post:
    import aiohttp  # optional, benchmark only

    session = await stack.enter_async_context(aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=IN_FLIGHT), trust_env=False))

    async def post() -> None:
        async with session.post(url, data=BODY, headers=HEADERS) as response:
            await response.read()
            response.raise_for_status()
    return post


class _Bare(asyncio.Protocol):
    """The floor: one write, and a future resolved at the end of the (bodiless) answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if b"\r\n\r\n" in self.buffer and self.done is not None:
            self.buffer = b""
            self.done.set_result(None)


async def bare_protocol(stack: AsyncExitStack, url: str) -> Post:
    loop = asyncio.get_running_loop()
    target = httpx.URL(url)
    request = b"".join([
        b"POST / HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\n" % (target.netloc, len(BODY)),
        *(f"{name}: {value}\r\n".encode() for name, value in HEADERS), b"\r\n", BODY])
    idle: list[_Bare] = []
    for _ in range(IN_FLIGHT):
        transport, protocol = await loop.create_connection(_Bare, target.host, target.port or 80)
        stack.callback(transport.close)
        idle.append(protocol)

    async def post() -> None:
        protocol = idle.pop()
        protocol.done = loop.create_future()
        assert protocol.transport is not None
        protocol.transport.write(request)
        await protocol.done
        idle.append(protocol)
    return post


async def http_sender(stack: AsyncExitStack, url: str, *, block: bool = False,
                      sender_class: type[HttpSender] = HttpSender) -> Post:
    allow = ["127.0.0.1/32"] if block else []
    sender = sender_class(IN_FLIGHT, block, allow, "bench/1")
    stack.push_async_callback(sender.aclose)

    async def post() -> None:
        result = await sender.send(url, HEADERS, BODY, 10.0)
        if result.status != 200:
            raise RuntimeError(f"{result.error_kind}: {result.error}")
    return post


async def http_sender_guarded(stack: AsyncExitStack, url: str) -> Post:
    return await http_sender(stack, url, block=True)


CHOSEN = "HttpSender.send over dispatcher.http.transport (chosen)"
CLIENTS: dict[str, Factory] = {
    "httpx, default transport (httpcore)": httpx_default,
    "httpx + httpx-aiohttp transport": httpx_aiohttp_package,
    "aiohttp alone": aiohttp_alone,
    "bare asyncio protocol (floor)": bare_protocol,
    CHOSEN: http_sender,
    "HttpSender.send over dispatcher.http.transport, guarded": http_sender_guarded,
}


def baseline_sender(tree: str) -> type[HttpSender]:
    """``HttpSender`` from the ``dispatcher`` package in ``tree``, loaded beside ours.

    Our modules step aside in ``sys.modules`` while the other tree's import
    (they keep references to their own modules), then come back.
    """
    def ours(name: str) -> bool:
        return name == "dispatcher" or name.startswith("dispatcher.")
    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, tree)
    try:
        module = importlib.import_module("dispatcher.http.sender")
        if not module.__file__ or not module.__file__.startswith(tree):
            raise SystemExit(f"--baseline {tree}: no dispatcher package there")
        sender_class: type[HttpSender] = module.HttpSender
    finally:
        sys.path.remove(tree)
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
    return sender_class


async def measure(factory: Factory, url: str, requests: int) -> tuple[float, float]:
    """(CPU ms per request, requests/s) for ``requests`` POSTs, 16 in flight."""
    async with AsyncExitStack() as stack:
        post = await factory(stack, url)
        for _ in range(IN_FLIGHT * 4):  # warm up: open the connections
            await post()
        remaining = requests

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await post()

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / requests * 1000, requests / wall


def serve() -> None:
    """Child process: a non-recording Receiver; prints its URL, stops when stdin closes."""
    from outbox.testing import Receiver

    with Receiver(record=False) as receiver:
        print(receiver.url, flush=True)
        sys.stdin.read()


async def run(args: argparse.Namespace, url: str,
              baseline: type[HttpSender] | None = None) -> None:
    clients = dict(CLIENTS)
    if baseline is not None:
        clients["HttpSender.send, --baseline tree"] = functools.partial(
            http_sender, sender_class=baseline)
        clients["HttpSender.send, --baseline tree, guarded"] = functools.partial(
            http_sender, block=True, sender_class=baseline)
    names = [n for n in clients
             if ("httpx-aiohttp" not in n or importlib.util.find_spec("httpx_aiohttp"))
             and ("aiohttp alone" not in n or importlib.util.find_spec("aiohttp"))
             and (not args.only or "--baseline" in n
                  or any(o.lower() in n.lower() for o in args.only))]
    results: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for _ in range(args.runs):
        for name in names:
            results[name].append(await measure(clients[name], url, args.requests))
    sniffio = "installed" if importlib.util.find_spec("sniffio") else "NOT installed"
    print(f"{args.requests} POSTs x {args.runs} runs, {IN_FLIGHT} in flight; "
          f"httpx {httpx.__version__}, sniffio {sniffio}"
          + (f"; --baseline {args.baseline}" if baseline is not None else "") + "\n")
    # CPU against the chosen client's in the same round: a ratio the machine's
    # other work moves far less than either figure.
    reference = results.get(CHOSEN)
    print(f"| {'client':<58} | CPU ms/request | CPU x chosen | requests/s |")
    print(f"| {'-' * 58} | -------------: | -----------: | ---------: |")
    for name, samples in results.items():
        cpu = statistics.median(s[0] for s in samples)
        rate = statistics.median(s[1] for s in samples)
        ratio = f"{'-':>12}"
        if reference:
            pairs = zip(samples, reference, strict=True)
            ratio = f"{statistics.median(s[0] / r[0] for s, r in pairs):12.2f}"
        print(f"| {name:<58} | {cpu:14.3f} | {ratio} | {rate:10,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="POSTs per run")
    parser.add_argument("--runs", type=int, default=5, help="runs per client (medians shown)")
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="run only the clients whose name contains TEXT (repeatable)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also measure the HttpSender of the dispatcher package in DIR")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    baseline = baseline_sender(str(Path(args.baseline).resolve())) if args.baseline else None
    # The receiver's own shutdown chatter is not ours to show.
    child = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url:
            raise SystemExit("the receiver did not start")
        asyncio.run(run(args, url, baseline))
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


if __name__ == "__main__":
    main()
