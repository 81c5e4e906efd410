"""Serving the view with uvicorn, on a socket bound here first, so that an address in use
is one line from the command (exit 1) rather than a server's log."""

from __future__ import annotations

import logging
import signal
import socket
import sys
from types import FrameType

import uvicorn

from outbox.web.app import create_app
from outbox.web.config import WebConfig


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host`` (a name or an address) and ``port`` (0: any)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def url(sock: socket.socket) -> str:
    """The address people open, as the socket got it (the port chosen for port 0)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(config: WebConfig, sock: socket.socket) -> None:
    """Serve until SIGINT or SIGTERM; each request and each action logged to stderr."""
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = uvicorn.Server(uvicorn.Config(
        create_app(config), log_level="info", proxy_headers=False, server_header=False,
        date_header=False, lifespan="on"))
    # uvicorn stops gracefully on SIGINT and SIGTERM, then raises the signal again for the
    # handler it found; with this one in place that ends here, and the command exits 0.
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stopped(_sig: int, _frame: FrameType | None) -> None:
    """The signal uvicorn passes on once it has stopped: nothing more to do."""
