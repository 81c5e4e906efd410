"""``outbox web [--listen HOST:PORT] [--allow-actions]``: the web view for operators.

The view itself is :mod:`outbox.web`, imported only here and only once the
options are known to be sound: without the extra ``outbox-dispatcher[web]``
the command says what to install (exit 1); ``--allow-actions`` on an
address other than loopback without ``OUTBOX_WEB_PASSWORD`` is refused
(exit 2) before anything is opened.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from outbox._cli import common
from outbox._shared import extras
from outbox._shared.dsn import resolve_dsn
from outbox.web.config import DEFAULT_HOST, DEFAULT_PORT, InsecureWebConfig, WebConfig


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "web", help="serve a web view for operators: endpoints, dead letters, events",
        description="Serve the endpoints with their backlog, circuit and problems (/), the "
        "dead letters with the filters of `dead list` (/dead), one event's story as `show` "
        "tells it (/events/EVENT_ID) and a search by event id, idempotency key or ordering "
        "key (/search?q=TEXT); ?format=json on any of them answers the matching --json "
        "shape. It reads through connections of its own under a statement timeout, shows no "
        "secret, header value or payload (an event's payload only on its page, when asked), "
        "and changes nothing unless --allow-actions is given. With OUTBOX_WEB_PASSWORD set it "
        "asks for HTTP basic authentication (user outbox). Needs the extra "
        "outbox-dispatcher[web].")
    parser.add_argument("--listen", type=_address, default=(DEFAULT_HOST, DEFAULT_PORT),
                        metavar="HOST:PORT",
                        help=f"where to serve (default {DEFAULT_HOST}:{DEFAULT_PORT}; port 0 "
                        "picks a free one, printed at start)")
    parser.add_argument("--allow-actions", action="store_true",
                        help="retry and discard dead letters from an event's page (on an "
                        "address other than loopback only with OUTBOX_WEB_PASSWORD)")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


def _address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, an IPv6 address in brackets (``[::1]:8080``)."""
    host, colon, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit() or int(port) > 65535 or "[" in host:
        raise argparse.ArgumentTypeError(
            f"invalid address {text!r}: give HOST:PORT, such as 127.0.0.1:8080 or [::1]:8080")
    return host, int(port)


def run(args: argparse.Namespace) -> int:
    host, port = args.listen
    try:
        config = WebConfig(dsn=resolve_dsn(getattr(args, "dsn", None)), host=host, port=port,
                           allow_actions=args.allow_actions,
                           password=os.environ.get("OUTBOX_WEB_PASSWORD") or None)
    except InsecureWebConfig as exc:
        raise common.UsageError(str(exc)) from None
    missing = extras.missing("outbox web", "web", extras.WEB)
    if missing is not None:
        raise common.CommandFailed(missing)
    with common.connect(args):  # the database answers, and holds the schema this reads
        pass
    from outbox.web.serve import bind, serve, url

    try:
        sock = bind(config.host, config.port)
    except OSError as exc:
        raise common.CommandFailed(f"cannot listen on {config.host}:{config.port}: "
                                   f"{exc.strerror or exc}") from None
    mode = "actions allowed" if config.allow_actions else "read-only"
    guard = ", password required" if config.password else ""
    print(f"outbox web: serving {url(sock)} ({mode}{guard}); Ctrl-C stops it", flush=True)
    serve(config, sock)
    return common.EXIT_OK
