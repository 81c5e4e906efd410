"""The web view's pure parts: the counts' cache, the guard's checks, the configuration."""

from __future__ import annotations

import base64
import threading

import pytest

from outbox.web.cache import Snapshot
from outbox.web.config import InsecureWebConfig, WebConfig, host_name, is_loopback
from outbox.web.guard import Throttle, Tokens, authorised, request_host
from tests.support.clock import FakeClock


def test_a_fresh_answer_is_served_without_computing() -> None:
    """Within its freshness the cached answer serves, and its age is told."""
    clock, calls = FakeClock(), []
    snap = Snapshot(lambda: calls.append(1) or len(calls), fresh=5, stale=60, clock=clock)
    assert snap.get() == (1, 0)
    clock.now += 3
    assert snap.get() == (1, 3)
    assert calls == [1]


def test_a_stale_answer_serves_while_the_next_is_computed_behind() -> None:
    """Stale but not too old: served at once, and one computation starts behind the page."""
    clock, started, release = FakeClock(), threading.Event(), threading.Event()
    results = iter([1, 2])

    def compute() -> int:
        value = next(results)
        if value == 2:
            started.set()
            release.wait(5)
        return value

    snap = Snapshot(compute, fresh=5, stale=60, clock=clock)
    assert snap.get()[0] == 1
    clock.now += 10
    assert snap.get() == (1, 10)  # stale: served, refresh started
    assert started.wait(5)
    assert snap.get() == (1, 10)  # a second request starts no second computation
    release.set()
    for _ in range(100):
        if snap.get()[0] == 2:
            break
        threading.Event().wait(0.01)
    assert snap.get()[0] == 2


def test_too_old_an_answer_makes_the_request_wait_for_a_new_one() -> None:
    """Older than ``stale``: the request computes (and sees an error if there is one)."""
    clock, values = FakeClock(), iter([1, 2])
    snap = Snapshot(lambda: next(values), fresh=5, stale=60, clock=clock)
    snap.get()
    clock.now += 61
    assert snap.get() == (2, 0)

    def broken() -> int:
        raise RuntimeError("database down")

    failing = Snapshot(broken, clock=clock)
    with pytest.raises(RuntimeError, match="database down"):
        failing.get()


def test_an_expensive_answer_stays_fresh_longer() -> None:
    """Fresh for ten times what it took: the counting takes at most a tenth of the time."""
    clock = FakeClock()

    def slow() -> int:
        clock.now += 2  # two seconds of counting
        return 1

    snap = Snapshot(slow, fresh=5, stale=600, clock=clock)
    snap.get()
    clock.now += 15
    assert snap.get() == (1, 17)  # 17 s old, fresh for 20


def test_tokens_are_bound_to_their_cookie_and_process() -> None:
    """A token is valid for its cookie only, from this process only."""
    tokens, other = Tokens(), Tokens()
    cookie = tokens.cookie()
    token = tokens.token(cookie)
    assert tokens.valid(cookie, token)
    assert not tokens.valid(tokens.cookie(), token)
    assert not other.valid(cookie, token)
    assert not tokens.valid(None, token)
    assert not tokens.valid(cookie, None)
    assert not tokens.valid(cookie, "")


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(("header", "ok"), [
    (_basic("outbox:pw"), True), (_basic("outbox:pw2"), False), (_basic("root:pw"), False),
    (_basic("outbox"), False), ("Bearer " + _basic("outbox:pw")[6:], False), ("Basic", False),
    ("Basic ***", False), (None, False), ("basic " + _basic("outbox:pw")[6:], True),
])
def test_basic_authentication(header: str | None, ok: bool) -> None:
    """User outbox and the password, nothing else."""
    assert authorised(header, "pw") is ok


@pytest.mark.parametrize(("header", "host"), [
    ("127.0.0.1:8080", "127.0.0.1"), ("localhost", "localhost"), ("[::1]:8080", "[::1]"),
    ("[::1]", "[::1]"), ("evil.example:80", "evil.example"), ("", ""),
    ("localhost:notaport", ""), ("localhost:80:81", ""), ("[::1]junk", ""),
    ("[::1]:8080x", ""), ("local host", ""), ("localhost/x", ""), ("localhost:", ""),
    ("127.0.0.1:123456", ""), ("[::1", ""),
])
def test_the_host_of_a_host_header(header: str, host: str) -> None:
    """A well-formed Host gives its host; a malformed one gives none (so it matches no
    allowed host and is answered 421)."""
    assert request_host(header) == host


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False), ("::", False),
    ("10.0.0.1", False), ("db.example", False), ("localhost.example", False),
])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_actions_beyond_loopback_need_a_password() -> None:
    """The configuration refuses actions reachable by others without a password."""
    with pytest.raises(InsecureWebConfig, match="OUTBOX_WEB_PASSWORD"):
        WebConfig(dsn="", host="0.0.0.0", allow_actions=True)
    WebConfig(dsn="", host="0.0.0.0", allow_actions=True, password="pw")
    WebConfig(dsn="", host="127.0.0.1", allow_actions=True)
    with pytest.raises(InsecureWebConfig, match="OUTBOX_WEB_PASSWORD"):
        WebConfig(dsn="", host="0.0.0.0", allow_actions=True, no_password=True)


def test_beyond_loopback_a_password_or_no_password() -> None:
    """Off loopback the view needs a password or --no-password; on loopback neither."""
    with pytest.raises(InsecureWebConfig, match="--no-password"):
        WebConfig(dsn="", host="0.0.0.0")
    WebConfig(dsn="", host="0.0.0.0", no_password=True)
    WebConfig(dsn="", host="10.0.0.1", password="pw")
    WebConfig(dsn="", host="::1")


@pytest.mark.parametrize(("listen", "allowed", "host", "ok"), [
    ("127.0.0.1", (), "127.0.0.1", True), ("127.0.0.1", (), "localhost", True),
    ("127.0.0.1", (), "[::1]", True), ("127.0.0.1", (), "evil.example", False),
    ("0.0.0.0", (), "0.0.0.0", True), ("0.0.0.0", (), "10.0.0.1", False),
    ("10.0.0.1", (), "10.0.0.1", True), ("::", (), "[::]", True),
    ("0.0.0.0", ("View.Example",), "view.example.", True),
    ("0.0.0.0", ("[2001:db8::1]",), "2001:DB8:0::1", True), ("0.0.0.0", (), "", False),
])
def test_the_names_a_request_may_be_addressed_to(listen: str, allowed: tuple[str, ...],
                                                  host: str, ok: bool) -> None:
    """The listen address, localhost, 127.0.0.1, ::1 and --allowed-host, in any spelling."""
    config = WebConfig(dsn="", host=listen, no_password=True, allowed_hosts=allowed)
    assert (host_name(host) in config.hosts) is ok


def test_the_throttle_lets_a_password_through_once_the_oldest_failure_leaves_the_window() -> None:
    """Ten failures in the window close it; it opens when the oldest is a window old."""
    now = [100.0]
    throttle = Throttle(limit=10, window=60.0, clock=lambda: now[0])
    for _ in range(10):
        assert throttle.wait() == 0
        throttle.failed()
        now[0] += 1
    assert throttle.wait() == 50.0  # the first failure, at 100, leaves at 160
    now[0] = 160.0
    assert throttle.wait() == 0
