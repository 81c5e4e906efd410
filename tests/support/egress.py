"""Egress as companies run it, on 127.0.0.1: private CAs, client certificates, a forward proxy.

- :class:`Pki`: certificate authorities made at test time (``trustme``), one
  signing the receivers, one the clients, with their files written to a
  folder as a mounted Secret would hold them;
- :func:`server_context`: a receiver's TLS context, asking for a client
  certificate signed by a given CA when told to;
- :class:`ForwardProxy`: a real forward proxy (``CONNECT`` tunnels and
  absolute-form requests, to 127.0.0.1 only) that counts what it carried
  and can refuse, ask for credentials, or misbehave on cue.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from tests.support.loop_server import LoopServer

SERVER_NAMES = ("127.0.0.1", "localhost", "hooks.test")


@dataclass
class Pki:
    """A receivers' CA and a clients' CA, and files of theirs under ``folder``."""

    folder: Path
    servers: trustme.CA = field(default_factory=trustme.CA)
    clients: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.server_cert = self.servers.issue_cert(*SERVER_NAMES)
        self.ca_file = self.write("ca.pem", self.servers.cert_pem.bytes())

    def write(self, name: str, data: bytes) -> str:
        """Write ``data`` to ``folder/name`` as a Secret's update would: a new file renamed
        over the old one (new inode); its absolute path."""
        path = self.folder / name
        temporary = self.folder / f".{name}.new"
        temporary.write_bytes(data)
        os.replace(temporary, path)
        return str(path)

    def client_files(self, prefix: str = "client", *, ca: trustme.CA | None = None,
                     expired: bool = False) -> tuple[str, str]:
        """A client certificate signed by ``ca`` (the clients' CA), and its key: their paths."""
        kwargs = {}
        if expired:
            kwargs["not_after"] = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
        leaf = (ca or self.clients).issue_cert("dispatcher.test", **kwargs)
        cert = self.write(f"{prefix}.pem", b"".join(p.bytes() for p in leaf.cert_chain_pems))
        key = self.write(f"{prefix}.key", leaf.private_key_pem.bytes())
        os.chmod(key, 0o600)  # as a key should be: another mode is warned of
        return cert, key


def server_context(pki: Pki, *, client_ca: trustme.CA | None = None) -> ssl.SSLContext:
    """A receiver's context: the receivers' certificate; with ``client_ca``, a client
    certificate signed by it is required."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    pki.server_cert.configure_cert(context)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(context)
    return context


Misbehaviour = Callable[[asyncio.StreamWriter], Awaitable[None]]
"""Written to a client instead of the answer to CONNECT (a hostile proxy)."""


class ForwardProxy(LoopServer):
    """An HTTP forward proxy on 127.0.0.1 that counts what it carried.

    ``credentials=("user", "pass")``: a request without them gets 407;
    ``refuse_with=502``: every CONNECT gets that status; ``misbehave``:
    written to the client in place of the answer to CONNECT.
    """

    def __init__(self, *, credentials: tuple[str, str] | None = None,
                 refuse_with: int | None = None, misbehave: Misbehaviour | None = None) -> None:
        super().__init__("forward-proxy")
        self.credentials = credentials
        self.refuse_with = refuse_with
        self.misbehave = misbehave
        self.connections = 0     # client connections accepted
        self.tunnels = 0         # CONNECT tunnels opened
        self.forwarded = 0       # absolute-form requests relayed
        self.refused = 0         # requests answered 407 or refuse_with
        self.authorizations: list[str | None] = []  # Proxy-Authorization of each request

    @property
    def url(self) -> str:
        if self.credentials is None:
            return f"http://127.0.0.1:{self.port}"
        user, password = self.credentials
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, target, headers = _parse_head(head)
                self.authorizations.append(headers.get("proxy-authorization"))
                if not self._authorized(headers):
                    self.refused += 1
                    writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                                 b"proxy-authenticate: Basic realm=\"test\"\r\n"
                                 b"content-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                if method == "CONNECT":
                    await self._tunnel(target, reader, writer)
                    return
                upstream = await self._forward(method, target, head, headers, reader, writer,
                                               upstream)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            if upstream is not None:
                upstream[1].close()
            writer.close()
            self._tasks.discard(task)

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.credentials is None:
            return True
        expected = base64.b64encode(":".join(self.credentials).encode()).decode()
        return headers.get("proxy-authorization") == f"Basic {expected}"

    async def _tunnel(self, target: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        if self.misbehave is not None:
            await self.misbehave(writer)
            return
        if self.refuse_with is not None:
            self.refused += 1
            writer.write(f"HTTP/1.1 {self.refuse_with} Refused\r\ncontent-length: 0\r\n\r\n"
                         .encode())
            await writer.drain()
            return
        host, port = _local(target)
        up_reader, up_writer = await asyncio.open_connection(host, port)
        self.tunnels += 1
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def _forward(self, method: str, target: str, head: bytes, headers: dict[str, str],
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None,
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Relay one absolute-form request in origin form, on a kept upstream connection."""
        if not target.startswith("http://"):
            raise ConnectionError(f"not an absolute-form target: {target}")
        authority, _, path = target.removeprefix("http://").partition("/")
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if upstream is None:
            upstream = await asyncio.open_connection(*_local(authority))
        lines = head.decode("latin-1").split("\r\n")
        kept = [line for line in lines[1:] if line and not line.lower().startswith(
            "proxy-authorization:")]
        request = "\r\n".join([f"{method} /{path} HTTP/1.1", *kept]) + "\r\n\r\n"
        upstream[1].write(request.encode("latin-1") + body)
        answer = await upstream[0].readuntil(b"\r\n\r\n")
        _, _, answer_headers = _parse_head(answer)
        answer += await upstream[0].readexactly(int(answer_headers.get("content-length", "0")))
        self.forwarded += 1
        writer.write(answer)
        await writer.drain()
        return upstream


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """The first line's first two words (method and target, or version and status), and the
    headers by lower-case name."""
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return first[0], first[1], headers


def _local(authority: str) -> tuple[str, int]:
    """Where a target points, refused unless it is this machine (the tests talk to no other)."""
    host, _, port = authority.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "hooks.test"):
        raise ConnectionError(f"the test proxy reaches only 127.0.0.1, not {host}")
    return "127.0.0.1", int(port)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.close()
