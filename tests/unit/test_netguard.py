"""The SSRF policy, classified from address literals only (nothing is resolved or reached)."""

from __future__ import annotations

import ipaddress

import pytest

from dispatcher.http.netguard import NetworkPolicy, parse_allow_list
from outbox._shared.addresses import carried_ipv4, is_blocked_address, literal_address

BLOCKED = [
    "127.0.0.1", "127.255.255.254", "10.1.2.3", "172.16.0.1", "172.31.255.255",
    "192.168.1.1", "169.254.0.1", "169.254.169.254", "100.64.0.1", "100.127.255.255",
    "0.0.0.0", "0.1.2.3", "192.0.0.1", "198.18.0.1", "198.19.255.255", "240.0.0.1",
    "255.255.255.255", "224.0.0.1", "239.255.255.250",
    "::1", "::", "fe80::1", "febf::1", "fc00::1", "fd12:3456::1", "fd00:ec2::254",
    "ff02::1", "64:ff9b::7f00:1", "64:ff9b:1::808:808", "2002:7f00:1::1", "2001:0:4136::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",
]
PUBLIC = [
    "8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "100.128.0.0",
    "172.15.255.255", "172.32.0.0", "192.0.1.1", "198.17.255.255", "223.255.255.255",
    "2606:4700:4700::1111", "2a00:1450:4001::200e", "2001:4860:4860::8888",
    "::ffff:8.8.8.8", "64:ff9b::808:808",
]


@pytest.mark.parametrize("address", BLOCKED)
def test_internal_addresses_are_blocked(address: str) -> None:
    """Loopback, private, link-local, CGNAT, metadata, multicast, tunnels to those: blocked."""
    assert is_blocked_address(address)
    assert is_blocked_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    """Ordinary public addresses, including ones just outside blocked ranges, pass."""
    assert not is_blocked_address(address)


@pytest.mark.parametrize("spelling", [
    "127.1", "2130706433", "0x7f000001", "017700000001", "[::1]", "[::ffff:127.0.0.1]",
    "127.0.0.1", "127.0.0.1.", "0x7F.0.0.1",
])
def test_loopback_spellings_read_as_loopback_literals(spelling: str) -> None:
    """Every legacy and bracketed spelling of loopback is read as a loopback address."""
    address = literal_address(spelling)
    assert address is not None
    assert is_blocked_address(address)
    loopback = "::1" if spelling == "[::1]" else "127.0.0.1"
    refusal = NetworkPolicy.build(True).refusal(spelling)
    assert refusal == f"{loopback} is a private or internal address"


@pytest.mark.parametrize("host", ["localhost", "example.com", "1e100.net", "deadbeef.io", ""])
def test_host_names_are_not_literals(host: str) -> None:
    """Names are left to the resolver check: they are not mistaken for IP literals."""
    assert literal_address(host) is None
    assert NetworkPolicy.build(True).refusal(host) is None


@pytest.mark.parametrize("host", ["1.2.3.4.5", "::g", "[fe80::1%]"])
def test_numeric_looking_hosts_that_are_no_address_are_refused(host: str) -> None:
    """A host another library could take for an address, but we cannot read, is refused."""
    refusal = NetworkPolicy.build(True).refusal(host)
    assert refusal == f"{host} is not an IP address that can be checked"


def test_blocking_off_allows_everything() -> None:
    """Without --block-private-networks no address is refused."""
    policy = NetworkPolicy.build(False)
    assert policy.address_allowed("127.0.0.1")
    assert policy.refusal("127.0.0.1") is None


def test_allowed_cidr_lets_its_addresses_through_only() -> None:
    """An allowed CIDR admits its addresses (mapped IPv6 too) and nothing else internal."""
    policy = NetworkPolicy.build(True, ["10.20.0.0/16"])
    assert policy.address_allowed("10.20.3.4")
    assert policy.address_allowed("::ffff:10.20.3.4")
    assert not policy.address_allowed("10.21.0.1")
    assert not policy.address_allowed("127.0.0.1")
    assert policy.address_allowed("8.8.8.8")


def test_an_ipv4_cidr_does_not_admit_ipv6_addresses() -> None:
    """0.0.0.0/0 allows every IPv4 address, never an IPv6 one such as ::1."""
    policy = NetworkPolicy.build(True, ["0.0.0.0/0"])
    assert policy.address_allowed("127.0.0.1")
    assert not policy.address_allowed("::1")
    assert not policy.address_allowed("fd00:ec2::254")


def test_allowed_host_name_matches_whatever_its_spelling() -> None:
    """A host name on the allow-list matches case-insensitively, with or without a final dot."""
    policy = NetworkPolicy.build(True, ["Hooks.Internal."])
    assert policy.host_allowed("hooks.internal")
    assert policy.host_allowed("HOOKS.INTERNAL.")
    assert not policy.host_allowed("other.internal")
    assert policy.refusal("hooks.internal") is None


def test_allow_list_entries_split_into_networks_and_hosts() -> None:
    """A bare address is a /32 (or /128) network; anything else valid is a host name."""
    networks, hosts = parse_allow_list(["127.0.0.1", "fd00::/8", "[::1]", "svc.local"])
    assert [str(n) for n in networks] == ["127.0.0.1/32", "fd00::/8", "::1/128"]
    assert hosts == frozenset({"svc.local"})


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "", "two words", "a..b", "host/path"])
def test_bad_allow_list_entry_is_refused_with_its_name(entry: str) -> None:
    """An entry that is neither a CIDR nor a host name is a ValueError naming it."""
    with pytest.raises(ValueError, match="--allow-network"):
        NetworkPolicy.build(True, [entry])


# -- NAT64, 6to4 and Teredo: judged by the IPv4 address they carry ------------------

TUNNELS = ["nat64", "6to4", "teredo"]
PUBLIC_V4 = ["8.8.8.8", "93.184.216.34"]
PRIVATE_V4 = ["169.254.169.254", "10.1.2.3", "127.0.0.1", "192.168.0.1", "100.64.0.1"]


def tunnelled(kind: str, ipv4: str) -> str:
    """The IPv6 address of ``kind`` that reaches ``ipv4``."""
    v4 = int(ipaddress.IPv4Address(ipv4))
    if kind == "nat64":  # 64:ff9b::a.b.c.d
        return str(ipaddress.IPv6Address((0x64FF9B << 96) | v4))
    if kind == "6to4":  # 2002:AABB:CCDD::1
        return str(ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80) | 1))
    # Teredo: 2001:0, server 65.54.227.120, flags and port, the client's address inverted
    return str(ipaddress.IPv6Address(
        (0x20010000 << 96) | (0x4136E378 << 64) | (0x800063BF << 32) | (v4 ^ 0xFFFFFFFF)))


@pytest.mark.parametrize("kind", TUNNELS)
def test_tunnelled_addresses_carry_their_ipv4_host(kind: str) -> None:
    """NAT64, 6to4 and Teredo addresses name the IPv4 host they reach; others carry none."""
    for ipv4 in PUBLIC_V4 + PRIVATE_V4:
        carried = carried_ipv4(ipaddress.IPv6Address(tunnelled(kind, ipv4)))
        assert carried == ipaddress.IPv4Address(ipv4)
    assert carried_ipv4(ipaddress.IPv6Address("2606:4700:4700::1111")) is None
    assert carried_ipv4(ipaddress.IPv4Address("8.8.8.8")) is None


@pytest.mark.parametrize("kind", TUNNELS)
@pytest.mark.parametrize("ipv4", PUBLIC_V4)
def test_tunnel_to_a_public_ipv4_address_is_allowed(kind: str, ipv4: str) -> None:
    """A NAT64, 6to4 or Teredo address of a public IPv4 host passes, as that host does."""
    address = tunnelled(kind, ipv4)
    assert not is_blocked_address(address)
    policy = NetworkPolicy.build(True)
    assert policy.address_allowed(address)
    assert policy.refusal(f"[{address}]") is None


@pytest.mark.parametrize("kind", TUNNELS)
@pytest.mark.parametrize("ipv4", PRIVATE_V4)
def test_tunnel_to_an_internal_ipv4_address_is_blocked(kind: str, ipv4: str) -> None:
    """A NAT64, 6to4 or Teredo address of metadata, private or loopback IPv4 is refused."""
    address = tunnelled(kind, ipv4)
    assert is_blocked_address(address)
    policy = NetworkPolicy.build(True)
    assert not policy.address_allowed(address)
    refusal = policy.refusal(f"[{address}]")
    assert refusal == f"{address} reaches {ipv4}, a private or internal address"


@pytest.mark.parametrize("kind", TUNNELS)
def test_allowed_ipv4_network_admits_tunnels_to_it(kind: str) -> None:
    """--allow-network 10.1.0.0/16 admits a tunnel to 10.1.2.3, not one to 10.2.0.1."""
    policy = NetworkPolicy.build(True, ["10.1.0.0/16"])
    assert policy.address_allowed(tunnelled(kind, "10.1.2.3"))
    assert not policy.address_allowed(tunnelled(kind, "10.2.0.1"))
    assert not policy.address_allowed(tunnelled(kind, "169.254.169.254"))


def test_allowed_ipv6_network_admits_tunnel_addresses_written_inside_it() -> None:
    """An allowed IPv6 CIDR still admits the addresses written in it, whatever they carry."""
    policy = NetworkPolicy.build(True, ["64:ff9b::/96"])
    assert policy.address_allowed(tunnelled("nat64", "10.1.2.3"))
    assert not policy.address_allowed(tunnelled("6to4", "10.1.2.3"))


@pytest.mark.parametrize("address", ["64:ff9b:1::808:808", "64:ff9b:1:2::a00:1"])
def test_local_use_nat64_stays_blocked(address: str) -> None:
    """Local-use NAT64 (64:ff9b:1::/48) maps as its operator chooses: blocked wholesale."""
    assert is_blocked_address(address)
    assert not NetworkPolicy.build(True).address_allowed(address)
