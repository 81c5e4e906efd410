"""``outbox web [--listen HOST:PORT] [--allow-actions] [--no-password] [--allowed-host
NAME]...``: the web view for operators.

The view itself is :mod:`outbox.web`, imported only here and only once the
options are known to be sound: without the extra ``outbox-dispatcher[web]``
the command says what to install (exit 1). On an address other than
loopback it needs ``OUTBOX_WEB_PASSWORD``, or ``--no-password`` for a view
an authenticating proxy guards; ``--allow-actions`` there needs the
password whatever else is given. Otherwise it is refused (exit 2) before
anything is opened.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from outbox._cli import common
from outbox._shared import extras
from outbox._shared.catalog_rows import Listing
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
        "asks for HTTP basic authentication (user outbox); on an address other than loopback "
        "it needs that, or --no-password behind an authenticating proxy. A request addressed "
        "(Host) to anything but the listen address, localhost, 127.0.0.1 or an --allowed-host "
        "is answered 421. Needs the extra outbox-dispatcher[web].")
    parser.add_argument("--listen", type=_address, default=(DEFAULT_HOST, DEFAULT_PORT),
                        metavar="HOST:PORT",
                        help=f"where to serve (default {DEFAULT_HOST}:{DEFAULT_PORT}; port 0 "
                        "picks a free one, printed at start)")
    parser.add_argument("--allow-actions", action="store_true",
                        help="retry and discard dead letters from an event's page (on an "
                        "address other than loopback only with OUTBOX_WEB_PASSWORD)")
    parser.add_argument("--no-password", action="store_true",
                        help="on an address other than loopback, serve without "
                        "OUTBOX_WEB_PASSWORD: an authenticating proxy in front guards the view")
    parser.add_argument("--allowed-host", action="append", default=[], type=_host,
                        metavar="NAME", help="a name requests may be addressed to (Host), "
                        "besides the listen address, localhost and 127.0.0.1 (repeatable): "
                        "the name people and the proxy use")
    common.add_dsn_option(parser)
    parser.set_defaults(func=run)


_HOST_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._:[]")


def _host(text: str) -> str:
    """A host name or address as a Host header gives it, without a port."""
    name = text.strip()
    if not name or not set(name.lower()) <= _HOST_CHARACTERS or (
            ":" in name and not name.startswith("[") and name.count(":") == 1):
        raise argparse.ArgumentTypeError(
            f"invalid host {text!r}: give a name or an address without a port, such as "
            "outbox.example.com or [2001:db8::1]")
    return name


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
    path = common.databases_file(args)
    many = path is not None and not (getattr(args, "db", None) or os.environ.get("OUTBOX_DB"))
    listing, refresh = Listing(()), 60.0
    if many and path is not None:
        listing, refresh = common.all_databases(path), common.refresh_of(path)
    try:
        config = WebConfig(dsn="" if many else common.target_dsn(args), host=host, port=port,
                           databases=listing.databases, set_aside=listing.aside,
                           databases_file=path if many and path is not None else "",
                           refresh_seconds=refresh,
                           allow_actions=args.allow_actions,
                           password=os.environ.get("OUTBOX_WEB_PASSWORD") or None,
                           no_password=args.no_password,
                           allowed_hosts=tuple(args.allowed_host))
    except InsecureWebConfig as exc:
        raise common.UsageError(str(exc)) from None
    missing = extras.missing("outbox web", "web", extras.WEB)
    if missing is not None:
        raise common.CommandFailed(missing)
    if not many:
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
    if not config.password and not config.loopback:
        print(f"outbox web: no password on {config.host} (--no-password): the authenticating "
              "proxy in front of it must guard every request", flush=True)
    if not config.loopback:
        print("outbox web: requests must be addressed (Host) to "
              + ", ".join(sorted(config.hosts)) + "; others are refused with 421", flush=True)
    serve(config, sock)
    return common.EXIT_OK
