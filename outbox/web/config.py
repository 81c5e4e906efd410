"""The web view's one frozen configuration, built by ``outbox web`` from its options and
``OUTBOX_WEB_PASSWORD``; nothing else in the view reads the environment."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

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


class InsecureWebConfig(ValueError):
    """Actions allowed where others could reach them, and no password to ask for."""


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

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is not from 0 to 65535")
        if self.allow_actions and not self.password and not is_loopback(self.host):
            raise InsecureWebConfig(
                f"--allow-actions on {self.host}, which is not a loopback address, needs "
                "OUTBOX_WEB_PASSWORD: anyone who reaches the port could retry and discard "
                "dead letters")
        if self.statement_timeout_seconds <= 0 or self.page_size < 1 or self.connections < 1:
            raise ValueError("statement timeout, page size and connections must be positive")

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)
