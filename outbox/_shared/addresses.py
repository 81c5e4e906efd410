"""Which addresses are internal: the ranges ``--block-private-networks`` refuses, pure.

One list for the dispatcher, which judges every address it is about to
connect to (``dispatcher.http.netguard``), and for
``outbox.endpoints.check_url``, which judges the host an application is
handed before the endpoint is saved: what the one refuses the other refuses,
in every spelling a resolver reads.

IPv6 addresses that carry an IPv4 address on to an IPv4 host (NAT64
``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``) are judged by the
IPv4 address they reach: NAT64 of a public address is as good as that
address, NAT64 of 169.254.169.254 is the metadata service. Local-use NAT64
(``64:ff9b:1::/48``) maps prefixes of the operator's choosing, so its
addresses cannot be judged and stay blocked. No I/O: nothing here resolves a
name.
"""

from __future__ import annotations

import ipaddress
import re
import socket

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


def unmapped(ip: IPAddress) -> IPAddress:
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
    address = unmapped(ip)
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


_NUMBER = re.compile(r"(?:[0-9]+|0x[0-9a-f]*)(?:\.(?:[0-9]+|0x[0-9a-f]*))*\.?")


def unreadable_address(host: str) -> bool:
    """Whether a host looks like an address that no reading above makes one of
    (``1.2.3.4.5``, ``99999999999``, ``0x100000000``, ``::g``): an HTTP library may hand it
    to the operating system as an address without any lookup, so it cannot be judged and
    is refused."""
    name = normalise_host(host)
    return literal_address(host) is None and (":" in name or bool(_NUMBER.fullmatch(name)))
