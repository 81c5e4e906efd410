"""The SSRF policy behind ``--block-private-networks``: which addresses we may connect to.

Pure classification, no I/O. The transport applies it twice: to an IP-literal
URL host before any connection, and to every address DNS returns for a host
name, after resolution and before connecting, so that the connection only
ever goes to an address that was checked (no second lookup a rebinding DNS
server could answer differently).

``--allow-network`` names the exceptions: a CIDR allows the addresses in it,
a host name allows that host whatever it resolves to.

Which addresses are internal is ``outbox._shared.addresses``'s list, which
``outbox.endpoints.check_url`` reads too. IPv6 addresses that carry an IPv4
address on to an IPv4 host (NAT64, 6to4, Teredo) are judged by the IPv4
address they reach, for the block list and the allow-list alike.

An endpoint saved with its URL checked (``guarded``) is judged by the policy
whatever ``--block-private-networks`` says (:meth:`NetworkPolicy.guarding`):
its host was public when the application saved it, and a name that resolves
inside later is refused all the same.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from outbox._shared.addresses import (
    IPAddress,
    IPNetwork,
    carried_ipv4,
    is_blocked_address,
    literal_address,
    normalise_host,
    unmapped,
    unreadable_address,
)


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

    def guarding(self) -> NetworkPolicy:
        """This policy with blocking on: for an endpoint saved with its URL checked, whatever
        ``--block-private-networks`` says; ``--allow-network``'s exceptions still hold."""
        return replace(self, block_private=True)

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
        address = unmapped(ipaddress.ip_address(ip) if isinstance(ip, str) else ip)
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
        if unreadable_address(host):
            return f"{host} is not an IP address that can be checked"
        address = literal_address(host)
        if address is None:
            return None
        if self.address_allowed(address):
            return None
        address = unmapped(address)
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
