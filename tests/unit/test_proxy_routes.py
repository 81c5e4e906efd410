"""Which proxy a request takes: the proxy URLs and NO_PROXY, as requests and httpx read them."""

from __future__ import annotations

import pytest

from dispatcher.cli import build_config
from dispatcher.config import ConfigError
from dispatcher.http.proxy import NoProxy, ProxyRoutes, parse_proxy


@pytest.mark.parametrize(("text", "host", "port", "shown"), [
    ("http://proxy.internal:3128", "proxy.internal", 3128, "http://proxy.internal:3128"),
    ("proxy.internal:3128", "proxy.internal", 3128, "http://proxy.internal:3128"),
    ("http://PROXY.internal", "proxy.internal", 80, "http://proxy.internal:80"),
    ("http://[fd00::1]:8080/", "fd00::1", 8080, "http://[fd00::1]:8080"),
    ("http://user:p%40ss@10.0.0.1:3128", "10.0.0.1", 3128, "http://***@10.0.0.1:3128"),
])
def test_a_proxy_url_is_read_and_shown_without_its_credentials(
        text: str, host: str, port: int, shown: str) -> None:
    """Host, port (80 by default), and a name for logs that never holds the password."""
    proxy = parse_proxy(text, "HTTPS_PROXY")
    assert (proxy.host, proxy.port, proxy.shown, str(proxy)) == (host, port, shown, shown)
    assert "p%40ss" not in repr(proxy)
    assert "p@ss" not in repr(proxy)


def test_credentials_become_basic_proxy_authorization() -> None:
    """Percent-escapes decoded, then user:password in base64."""
    assert parse_proxy("http://user:p%40ss@h:1", "X").authorization == b"Basic dXNlcjpwQHNz"
    assert parse_proxy("http://h:1", "X").authorization is None


@pytest.mark.parametrize(("text", "message"), [
    ("https://proxy:3128", "a https:// proxy is not supported"),
    ("socks5://proxy:1080", "a socks5:// proxy is not supported"),
    ("http://:3128", "names no host"),
    ("http://proxy:99999", "is not a proxy URL"),
    ("http://u:s3cret@proxy:port", "is not a proxy URL"),
])
def test_a_proxy_it_cannot_use_is_refused_at_start(text: str, message: str) -> None:
    """Exit 2 material: a clear message naming the variable, never the password."""
    with pytest.raises(ConfigError, match=message) as caught:
        build_config([], {"HTTPS_PROXY": text})
    assert "HTTPS_PROXY" in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_the_lower_case_variable_wins_and_an_empty_one_counts_as_unset() -> None:
    """https_proxy over HTTPS_PROXY; "" as if unset; likewise for http and no_proxy."""
    config = build_config([], {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2",
                               "HTTP_PROXY": "http://upper:3", "http_proxy": "",
                               "NO_PROXY": "a.test", "no_proxy": "b.test"})
    routes = config.proxies()
    assert routes.https is not None
    assert routes.https.host == "lower"
    assert routes.http is not None
    assert routes.http.host == "upper"
    assert (routes.direct.covers("b.test", 443), routes.direct.covers("a.test", 443)) == (
        True, False)
    assert "lower" not in repr(config)
    assert "upper" not in repr(config)


@pytest.mark.parametrize(("no_proxy", "host", "port", "direct"), [
    ("example.com", "example.com", 443, True),
    ("example.com", "api.example.com", 443, True),
    ("example.com", "badexample.com", 443, False),
    (".example.com", "api.example.com", 443, True),
    (".example.com", "example.com", 443, True),
    ("*.example.com", "a.b.example.com", 443, True),
    ("EXAMPLE.com", "Api.Example.COM", 443, True),
    ("example.com:8443", "example.com", 8443, True),
    ("example.com:8443", "example.com", 443, False),
    ("10.1.2.3", "10.1.2.3", 80, True),
    ("10.1.2.3", "10.1.2.4", 80, False),
    ("10.0.0.0/8", "10.200.0.1", 80, True),
    ("10.0.0.0/8", "11.0.0.1", 80, False),
    ("10.0.0.0/8", "ten.example", 80, False),
    ("fd00::/8", "fd12::1", 443, True),
    ("::1", "::1", 443, True),
    ("[::1]:8080", "::1", 8080, True),
    ("[::1]:8080", "::1", 443, False),
    ("*", "anything.example", 1, True),
    ("a.test, b.test ,c.test", "c.test", 1, True),
    ("a.test b.test", "b.test", 1, True),
    ("", "example.com", 443, False),
    ("localhost", "localhost", 80, True),
    ("example.com:nope", "example.com", 443, False),
])
def test_no_proxy_matches_as_requests_and_httpx_do(no_proxy: str, host: str, port: int,
                                                   direct: bool) -> None:
    """Names and the names under them, a leading dot ignored, addresses, ranges, *, ports;
    nothing resolved."""
    assert NoProxy(no_proxy).covers(host, port) is direct


def test_each_scheme_has_its_own_proxy() -> None:
    """https:// endpoints take HTTPS_PROXY, http:// ones HTTP_PROXY; none: direct."""
    routes = ProxyRoutes.from_settings("http://tunnel:1", "", "skip.test")
    assert routes.proxy_for("https", "a.test", 443) == routes.https
    assert routes.proxy_for("http", "a.test", 80) is None
    assert routes.proxy_for("https", "skip.test", 443) is None
    assert not ProxyRoutes.from_settings("", "", "")
