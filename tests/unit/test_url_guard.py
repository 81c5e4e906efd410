"""outbox.endpoints.check_url: the URL a customer types, judged without resolving a name."""

from __future__ import annotations

import pytest

from dispatcher.http.netguard import NetworkPolicy
from outbox.endpoints import InvalidEndpoint, check_url

INTERNAL = [
    "http://127.0.0.1/", "http://127.1/", "http://2130706433/", "http://0x7f000001/",
    "http://017700000001/", "http://0177.0.0.1/", "http://0x7f.1/", "http://[::1]/",
    "http://[::ffff:127.0.0.1]/", "http://[0:0:0:0:0:ffff:7f00:1]/", "http://[::127.0.0.1]/",
    "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://10.0.0.1/",
    "http://10.1/", "http://172.16.0.1/", "http://192.168.1.1:8080/", "http://100.64.0.1/",
    "http://0.0.0.0/", "http://0/", "http://[64:ff9b::7f00:1]/", "http://[2002:a00:1::]/",
    "http://[fe80::1%25eth0]/", "http://224.0.0.1/", "https://127.0.0.1.:443/",
]
NAMES_THIS_MACHINE = ["http://localhost/", "http://LOCALHOST./in", "https://localhost:8443/",
                      "http://api.localhost/", "http://a.b.localhost./"]
UNREADABLE = ["http://1.2.3.4.5/", "http://99999999999/", "http://0x100000000/"]
PUBLIC = ["https://hooks.example.com/in", "http://8.8.8.8/", "https://[2606:4700::1111]/",
          "https://localhost.example.com/", "https://mylocalhost/", "https://1e100.net/",
          "https://hooks.example.com:8443/a?token=x", "http://[64:ff9b::808:808]/"]


@pytest.mark.parametrize("url", INTERNAL)
def test_an_internal_address_is_refused_in_every_spelling(url: str) -> None:
    """Loopback, private, link-local (metadata), CGNAT, NAT64 and 6to4 of them: refused in
    decimal, octal, hex, short and IPv4-mapped forms, naming url."""
    with pytest.raises(InvalidEndpoint, match=r"^url .*private or internal address"):
        check_url(url)


@pytest.mark.parametrize("url", INTERNAL)
def test_what_it_refuses_the_dispatchers_guard_refuses(url: str) -> None:
    """The ranges are the dispatcher's: its guard refuses every host check_url refuses."""
    host = url.split("//", 1)[1].split("/", 1)[0]
    host = host.rsplit(":", 1)[0] if not host.endswith("]") and host.count(":") == 1 else host
    host = host.replace("%25", "%")
    assert NetworkPolicy(block_private=True).refusal(host) is not None, host


@pytest.mark.parametrize("url", NAMES_THIS_MACHINE)
def test_localhost_and_names_under_it_are_refused(url: str) -> None:
    """localhost (any case, a trailing dot) and every name under it (RFC 6761)."""
    with pytest.raises(InvalidEndpoint, match=r"^url .*\(localhost\)"):
        check_url(url)


@pytest.mark.parametrize("url", UNREADABLE)
def test_a_host_that_only_looks_numeric_is_refused(url: str) -> None:
    """A number no resolver reads as an address cannot be judged: refused."""
    with pytest.raises(InvalidEndpoint, match=r"^url .*looks like an address"):
        check_url(url)


@pytest.mark.parametrize("url", PUBLIC)
def test_public_hosts_and_names_pass_unresolved(url: str) -> None:
    """Public addresses and any other name pass, returned as given (nothing is resolved)."""
    assert check_url(url) == url


@pytest.mark.parametrize(("url", "says"), [
    ("ftp://hooks.example.com/", "http"), ("http://user:pw@8.8.8.8/", "password"),
    ("https://hooks.example.com/#x", "fragment"), ("", "required"), (None, "required"),
])
def test_what_the_endpoint_options_refuse_is_refused_first(url: object, says: str) -> None:
    """A URL the options refuse is refused as add refuses it (credentials never echoed)."""
    with pytest.raises(InvalidEndpoint, match=f"^url .*{says}") as raised:
        check_url(url)
    assert "pw" not in str(raised.value)
