"""Which proxy a request goes through: ``HTTPS_PROXY``, ``HTTP_PROXY`` and ``NO_PROXY``.

Read as requests and httpx read them (the command line picks the variables,
the lower-case one winning where both are set; this module only gets their
text): an ``https://`` endpoint goes through ``HTTPS_PROXY`` in a ``CONNECT``
tunnel, an ``http://`` one through ``HTTP_PROXY`` as an absolute-form
request, and neither for a host ``NO_PROXY`` names.

``NO_PROXY`` is a list separated by commas (or spaces): ``*`` (no proxy at
all), a host name, which also covers every name under it (``example.com``
covers ``api.example.com``; a leading ``.`` or ``*.`` is ignored, as curl
and Python's urllib ignore it), an IP address, a CIDR range
(``10.0.0.0/8``, ``fd00::/8``), each optionally with ``:PORT`` (then only
that port; ``[::1]:8080`` for an IPv6 address). Names are matched as
written, never resolved: ``NO_PROXY=10.0.0.0/8`` covers ``http://10.1.2.3/``,
not a name that resolves there.

A proxy is ``http://[USER:PASSWORD@]HOST[:PORT]`` (no scheme: ``http://``;
port 80 when none is given, as requests and httpx default it). Its
credentials are sent as ``Proxy-Authorization: Basic`` and shown nowhere:
:attr:`Proxy.shown` masks them, and it is the only way a proxy is named
in logs and errors. A proxy reached over TLS (``https://``) or SOCKS is
refused at start, with a message naming the variable.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Proxy:
    """A forward proxy: where to dial it, what to tell it, how to name it."""

    host: str  # ASCII; an IPv6 address without brackets
    port: int
    authorization: bytes | None = field(default=None, repr=False)  # b"Basic ...", or None
    shown: str = ""  # the proxy's URL with any credentials masked: for logs and last_error

    def __str__(self) -> str:
        return self.shown


def parse_proxy(text: str, variable: str) -> Proxy:
    """A proxy from a variable's value; ValueError naming the variable (never the password)."""
    raw = text.strip()
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise ValueError(f"{variable} is not a proxy URL such as http://proxy.internal:3128"
                         ) from None
    scheme = parts.scheme.lower()
    if scheme != "http":
        raise ValueError(f"{variable}: a {scheme}:// proxy is not supported; give an http:// "
                         "proxy (https endpoints still get TLS end to end, through CONNECT)")
    host = (parts.hostname or "").lower()
    if not host:
        raise ValueError(f"{variable} names no host; write it as http://HOST:PORT")
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"{variable} has an invalid host name") from None
    port = port or 80
    authorization = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        authorization = b"Basic " + base64.b64encode(pair.encode("utf-8"))
    bracketed = f"[{ascii_host}]" if ":" in ascii_host else ascii_host
    shown = f"http://{'***@' if authorization else ''}{bracketed}:{port}"
    return Proxy(ascii_host, port, authorization, shown)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One item of NO_PROXY."""

    name: str | None = None              # a host name: itself and the names under it
    network: IpNetwork | None = None     # an address (a /32 or /128) or a range
    port: int | None = None              # only this port; None: any


class NoProxy:
    """The hosts that ``NO_PROXY`` sends direct."""

    def __init__(self, text: str) -> None:
        items = [item.strip().lower() for item in text.replace(",", " ").split()]
        self.everything = "*" in items
        self._entries = [entry for item in items if item and item != "*"
                         for entry in _entry(item)]

    def __bool__(self) -> bool:
        return self.everything or bool(self._entries)

    def covers(self, host: str, port: int) -> bool:
        """Whether a request to ``host:port`` (host as the URL has it, ASCII) goes direct."""
        if self.everything:
            return True
        host = host.lower().rstrip(".")
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            address = None
        for entry in self._entries:
            if entry.port is not None and entry.port != port:
                continue
            if address is not None:
                if entry.network is not None and address in entry.network:
                    return True
            elif entry.name is not None and (host == entry.name
                                             or host.endswith("." + entry.name)):
                return True
        return False


def _entry(item: str) -> Iterable[_Entry]:
    """The entry an item of NO_PROXY stands for; none for one that cannot match anything."""
    host, port = _split_port(item)
    if port == -1:
        return []
    try:
        return [_Entry(network=ipaddress.ip_network(host, strict=False), port=port)]
    except ValueError:
        pass
    name = host.removeprefix("*").lstrip(".").rstrip(".")
    if not name:
        return []
    try:
        name = name.encode("idna").decode("ascii")
    except UnicodeError:
        return []
    return [_Entry(name=name, port=port)]


def _split_port(item: str) -> tuple[str, int | None]:
    """``host:port`` -> (host, port); (host, None) without a port; port -1 when malformed.

    An IPv6 address carries a port only in brackets (``[::1]:8080``): ``::1``
    alone is an address, not host ``:`` and port 1.
    """
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        if not rest:
            return host, None
        if not rest.startswith(":"):
            return host, -1
        text = rest[1:]
    elif item.count(":") == 1:
        host, _, text = item.partition(":")
    else:
        return item, None
    if not text.isdigit() or not 0 < int(text) < 65536:
        return host, -1
    return host, int(text)


@dataclass(frozen=True, slots=True)
class ProxyRoutes:
    """The proxies of the process, and the hosts that skip them."""

    https: Proxy | None = None
    http: Proxy | None = None
    direct: NoProxy = field(default_factory=lambda: NoProxy(""))

    @classmethod
    def from_settings(cls, https_proxy: str, http_proxy: str, no_proxy: str) -> ProxyRoutes:
        """From the variables' values ("" for unset); ValueError for a proxy it cannot use."""
        return cls(https=parse_proxy(https_proxy, "HTTPS_PROXY") if https_proxy else None,
                   http=parse_proxy(http_proxy, "HTTP_PROXY") if http_proxy else None,
                   direct=NoProxy(no_proxy))

    def __bool__(self) -> bool:
        return self.https is not None or self.http is not None

    def proxy_for(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy a request to ``scheme://host:port`` goes through; None: direct."""
        proxy = self.https if scheme == "https" else self.http
        if proxy is None or self.direct.covers(host, port):
            return None
        return proxy
