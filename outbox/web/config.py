"""The web view's one frozen configuration, built by ``outbox web`` from its options and
``OUTBOX_WEB_PASSWORD``; nothing else in the view reads the environment."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from outbox._shared.catalog_rows import Aside
from outbox._shared.databases import Database

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
USER = "outbox"
"""The one user name basic authentication asks for, with ``OUTBOX_WEB_PASSWORD``."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback address.

    Any other name counts as reaching further: it may resolve anywhere, and
    the guard that depends on this answer must not be talked out of itself.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(text: str) -> str:
    """A host as the Host check compares it: an IP address in its one spelling (no
    brackets, ``::1`` for ``[0::1]``), a name in lower case without a final dot."""
    bare = text.strip().strip("[]") if text.strip().startswith("[") else text.strip()
    try:
        return ipaddress.ip_address(bare).compressed
    except ValueError:
        return bare.lower().rstrip(".")


class InsecureWebConfig(ValueError):
    """The view reachable by others with nothing to stop them: no password, no choice."""


@dataclass(frozen=True)
class WebConfig:
    """What one ``outbox web`` process serves, and how it guards it."""

    dsn: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    allow_actions: bool = False
    """Retry and discard forms on an event's page; without it every POST is refused."""
    password: str | None = None
    """``OUTBOX_WEB_PASSWORD``: asked for by HTTP basic authentication (user ``outbox``)."""
    statement_timeout_seconds: float = 5.0
    """Every statement of the view is cancelled after this long (``statement_timeout``)."""
    page_size: int = 50
    """Dead letters and search results per page."""
    connections: int = 4
    """At most this many connections read at once; further requests wait for one."""
    no_password: bool = False
    """``--no-password``: off loopback, serve without a password, because an authenticating
    proxy in front guards the view (said at start)."""
    allowed_hosts: tuple[str, ...] = ()
    """``--allowed-host NAME``: more names requests may be addressed to (``Host``)."""
    databases: tuple[Database, ...] = ()
    """``--databases FILE``: every database of the file, each page of one with ``?db=NAME``
    (``dsn`` is then unused); empty for the one database of ``dsn``."""
    set_aside: tuple[Aside, ...] = ()
    """With ``databases``: the catalog rows set aside, shown on ``/databases`` with why."""
    databases_file: str = ""
    """With ``databases``: the file they were read from, read again (with its catalog)
    every ``refresh_seconds``; "" to keep the first list."""
    refresh_seconds: float = 60.0
    """The file's ``refresh``."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is not from 0 to 65535")
        if self.allow_actions and not self.password and not is_loopback(self.host):
            raise InsecureWebConfig(
                f"--allow-actions on {self.host}, which is not a loopback address, needs "
                "OUTBOX_WEB_PASSWORD: anyone who reaches the port could retry and discard "
                "dead letters")
        if not self.password and not self.no_password and not is_loopback(self.host):
            raise InsecureWebConfig(
                f"outbox web on {self.host}, which is not a loopback address, needs "
                "OUTBOX_WEB_PASSWORD, or --no-password when an authenticating proxy guards "
                "it: anyone who reaches the port could read every dead letter")
        if self.statement_timeout_seconds <= 0 or self.page_size < 1 or self.connections < 1:
            raise ValueError("statement timeout, page size and connections must be positive")

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def hosts(self) -> frozenset[str]:
        """What a request's ``Host`` may name (its port aside): the listen address,
        ``localhost``, ``127.0.0.1``, ``::1`` and the names of ``--allowed-host``."""
        return frozenset(host_name(h) for h in (
            self.host, "localhost", "127.0.0.1", "::1", *self.allowed_hosts))
