"""The SSRF policy behind ``--block-private-networks``: which addresses we may connect to.

Pure classification, no I/O. The transport applies it twice: to an IP-literal
URL host before any connection, and to every address DNS returns for a host
name, after resolution and before connecting, so that the connection only
ever goes to an address that was checked (no second lookup a rebinding DNS
server could answer differently).

``--allow-network`` names the exceptions: a CIDR allows the addresses in it,
a host name allows that host whatever it resolves to.

IPv6 addresses that carry an IPv4 address on to an IPv4 host (NAT64
``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``) are judged by the
IPv4 address they reach, for the block list and the allow-list alike: NAT64
of a public address is as good as that address, NAT64 of 169.254.169.254 is
the metadata service. Local-use NAT64 (``64:ff9b:1::/48``) maps prefixes of
the operator's choosing, so its addresses cannot be judged and stay blocked.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Addresses a webhook must never reach from inside the network. An explicit
# list rather than ``ip.is_private``, whose meaning changed between Python
# releases; the cloud metadata addresses (169.254.169.254, fd00:ec2::254) fall
# in the link-local and unique-local ranges.
_BLOCKED_V4 = tuple(ipaddress.IPv4Network(cidr) for cidr in (
    "0.0.0.0/8",        # "this network", includes the unspecified address
    "10.0.0.0/8",       # private
    "100.64.0.0/10",    # carrier-grade NAT
    "127.0.0.0/8",      # loopback
    "169.254.0.0/16",   # link-local, cloud metadata
    "172.16.0.0/12",    # private
    "192.0.0.0/24",     # IETF protocol assignments
    "192.0.2.0/24",     # documentation
    "192.168.0.0/16",   # private
    "198.18.0.0/15",    # benchmarking
    "198.51.100.0/24",  # documentation
    "203.0.113.0/24",   # documentation
    "224.0.0.0/4",      # multicast
    "240.0.0.0/4",      # reserved, includes broadcast
))
_BLOCKED_V6 = tuple(ipaddress.IPv6Network(cidr) for cidr in (
    "::/96",            # unspecified, loopback, deprecated IPv4-compatible
    "64:ff9b:1::/48",   # local-use NAT64: the operator's own mapping, not judgeable
    "100::/64",         # discard
    "2001:db8::/32",    # documentation
    "fc00::/7",         # unique local, includes fd00:ec2::254
    "fe80::/10",        # link-local
    "fec0::/10",        # site-local (deprecated)
    "ff00::/8",         # multicast
))

# Well-known NAT64 (RFC 6052): the IPv4 address is the last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _normalise(ip: IPAddress) -> IPAddress:
    """``::ffff:a.b.c.d`` is the IPv4 address a.b.c.d as far as routing goes."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def carried_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 host a NAT64, 6to4 or Teredo address reaches; None for other addresses.

    Teredo names two IPv4 addresses: its server's and its client's; traffic
    goes to the client's, so that is the one judged.
    """
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def _judged(ip: IPAddress) -> IPAddress:
    """The address whose kind decides: IPv4-mapped and tunnelled addresses as their IPv4."""
    address = _normalise(ip)
    return carried_ipv4(address) or address


def is_blocked_address(ip: IPAddress | str) -> bool:
    """Whether ``ip`` is loopback, private, link-local, metadata or otherwise internal."""
    address = _judged(ipaddress.ip_address(ip) if isinstance(ip, str) else ip)
    if isinstance(address, ipaddress.IPv4Address):
        return any(address in net for net in _BLOCKED_V4)
    return any(address in net for net in _BLOCKED_V6)


def normalise_host(host: str) -> str:
    """A URL host as we compare it: no brackets, lower case, no trailing dot."""
    return host.strip("[]").rstrip(".").lower()


def literal_address(host: str) -> IPAddress | None:
    """The address an IP-literal host names, in any spelling a resolver accepts.

    Besides the canonical forms this reads the legacy numeric IPv4 forms
    (``127.1``, ``2130706433``, ``0x7f000001``, ``017700000001``) the way
    ``inet_aton`` does, since some resolvers and clients still honour them.
    Returns None for a host name.
    """
    name = normalise_host(host)
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if name and all(c in "0123456789abcdefx." for c in name) and name[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class NetworkPolicy:
    """Blocking on or off, and the ``--allow-network`` exceptions."""

    block_private: bool = False
    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def build(cls, block_private: bool, allow: Iterable[str] = ()) -> NetworkPolicy:
        """Parse ``--allow-network`` entries; ValueError names the entry that is neither."""
        networks, hosts = parse_allow_list(list(allow))
        return cls(block_private, networks, hosts)

    def host_allowed(self, host: str) -> bool:
        """Whether the host name itself is on the allow-list (then any address goes)."""
        return normalise_host(host) in self.hosts

    def address_allowed(self, ip: IPAddress | str) -> bool:
        """Whether we may connect to ``ip``: blocking off, on the allow-list, or not internal.

        An allowed network admits an address written inside it, and a NAT64,
        6to4 or Teredo address whose IPv4 host is inside it.
        """
        if not self.block_private:
            return True
        address = _normalise(ipaddress.ip_address(ip) if isinstance(ip, str) else ip)
        judged = carried_ipv4(address) or address
        if any(candidate.version == net.version and candidate in net
               for candidate in {address, judged} for net in self.networks):
            return True
        return not is_blocked_address(judged)

    def refusal(self, host: str) -> str | None:
        """Why we must not connect to this IP-literal host; None if we may.

        Host names return None here: their addresses are checked after DNS.
        A host that only looks numeric is refused too, since an HTTP library
        may hand it to the operating system as an address without any lookup.
        """
        if not self.block_private or self.host_allowed(host):
            return None
        address = literal_address(host)
        if address is None:
            name = normalise_host(host)
            if ":" in name or name.replace(".", "").isdigit():
                return f"{host} is not an IP address that can be checked"
            return None
        if self.address_allowed(address):
            return None
        address = _normalise(address)
        carried = carried_ipv4(address)
        if carried is not None:
            return f"{address} reaches {carried}, a private or internal address"
        return f"{address} is a private or internal address"


def parse_allow_list(entries: Sequence[str]) -> tuple[tuple[IPNetwork, ...], frozenset[str]]:
    """Split ``--allow-network`` values into networks and host names."""
    networks: list[IPNetwork] = []
    hosts: set[str] = set()
    for entry in entries:
        text = entry.strip()
        try:
            networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        name = text.rstrip(".").lower()
        labels = name.split(".")
        if (not name or "/" in name or any(c.isspace() for c in name)
                or not all(0 < len(label) < 64 for label in labels)):
            raise ValueError(
                f"--allow-network {entry!r} is neither a CIDR (10.0.0.0/8, fd00::/8), "
                "an IP address nor a host name")
        hosts.add(name)
    return tuple(networks), frozenset(hosts)
