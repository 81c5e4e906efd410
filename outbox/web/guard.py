"""What stands between a browser and the view: the Host check, basic authentication,
the response headers, and the token every POST carries.

- **Host.** On every address, the view answers only requests addressed
  to its listen address, ``localhost``, ``127.0.0.1``, ``[::1]`` or a name
  given with ``--allowed-host`` (any port): a web page whose name an
  attacker rebinds to the view's address reaches the port, but with its
  own name in ``Host``, and is refused (421) before anything is read.
- **Password.** With ``OUTBOX_WEB_PASSWORD`` every request needs HTTP basic
  authentication as user ``outbox``; user and password are compared in
  constant time, both always.
- **Headers.** No script may run (there is none), no other site may frame
  the pages, no page is cached or sends a Referer.
- **Tokens.** A form's hidden ``token`` is an HMAC, under a key made when
  the process starts, of a random value the browser holds in a cookie
  (HttpOnly, SameSite=Strict): another site can make a browser send the
  cookie but can neither read it nor compute the token, so its forged
  POST is refused. A restart makes new keys: a page loaded before it must
  be loaded again.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import math
import re
import secrets
import time
from collections import deque
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox.web.config import USER, host_name

COOKIE = "outbox_csrf"
_SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; img-src 'self'; "
     b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class Tokens:
    """The cookie values a browser holds, and the form tokens bound to them."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    @staticmethod
    def cookie() -> str:
        return secrets.token_urlsafe(32)

    def token(self, cookie: str) -> str:
        return hmac.new(self._key, cookie.encode(), "sha256").hexdigest()

    def valid(self, cookie: str | None, token: str | None) -> bool:
        """Whether ``token`` was made for ``cookie`` by this process (constant time)."""
        if not cookie or not token:
            return False
        return hmac.compare_digest(self.token(cookie).encode(), token.encode())


_HOST_HEADER = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{1,5})?")
"""What RFC 9110 lets ``Host`` hold here: a bracketed IPv6 address or a name (an IPv4
address among them), then at most a numeric port; anything else matches no host."""


def request_host(header: str) -> str:
    """The host of a ``Host`` header, without its port: ``[::1]:8080`` -> ``[::1]``; the
    empty string for a malformed one (``localhost:80:x``, ``[::1]junk``, ``a b``)."""
    found = _HOST_HEADER.fullmatch(header)
    return found.group(1) if found else ""


def authorised(header: str | None, password: str) -> bool:
    """Whether an ``Authorization`` header gives user ``outbox`` and ``password``."""
    scheme, _, encoded = (header or "").partition(" ")
    try:
        given = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        given = b""
    user, _, secret = given.partition(b":")
    right_user = hmac.compare_digest(user, USER.encode())
    right_secret = hmac.compare_digest(secret, password.encode())
    return scheme.lower() == "basic" and right_user & right_secret


def over_https(headers: Headers, scope: Scope) -> bool:
    """Whether the browser reached the view over HTTPS: directly, or through a proxy that
    says so (``X-Forwarded-Proto: https``). Believing the header can only add ``Secure``
    to a cookie, which asks the browser for more, never less."""
    forwarded = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return scope.get("scheme") == "https" or forwarded == "https"


def set_cookie(response: Response, request: Request, name: str, value: str, *,
               max_age: int | None = None) -> None:
    """Set a cookie as the view (and the portal) sets every one: out of scripts' reach,
    never sent from another site, and over HTTPS only when the page came that way."""
    response.set_cookie(name, value, max_age=max_age, path="/", httponly=True,
                        samesite="strict", secure=over_https(request.headers, request.scope))


class Throttle:
    """Wrong passwords allowed per window, for the whole process: past ``limit`` in the
    last ``window`` seconds, every request giving a password is answered 429 until the
    oldest leaves the window. A guesser gets ``limit`` tries a minute, whatever its
    connections; the price is that a guesser can keep the operator out too, a minute at a
    time (an authenticating proxy in front, ``--no-password``, has no such price)."""

    def __init__(self, limit: int = 10, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limit, self._window, self._clock = limit, window, clock
        self._failures: deque[float] = deque()

    def wait(self) -> float:
        """Seconds until a password may be tried again; 0: now."""
        now = self._clock()
        while self._failures and self._failures[0] <= now - self._window:
            self._failures.popleft()
        if len(self._failures) < self._limit:
            return 0.0
        return self._failures[0] + self._window - now

    def failed(self) -> None:
        self._failures.append(self._clock())


class Guard:
    """ASGI middleware: the Host check, basic authentication (wrong passwords throttled),
    no POST at all when the view is read-only (403, whatever the address), and the response
    headers."""

    def __init__(self, app: ASGIApp, *, password: str | None, hosts: frozenset[str],
                 read_only: str | None) -> None:
        """``hosts``: what ``Host`` may name (``WebConfig.hosts``); ``read_only``: the
        refusal of every POST, or None with --allow-actions."""
        self._app = app
        self._password = password
        self._hosts = hosts
        self._read_only = read_only
        self._throttle = Throttle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        refusal: PlainTextResponse | None = None
        if host_name(request_host(headers.get("host", ""))) not in self._hosts:
            refusal = PlainTextResponse(
                "this view answers only requests addressed to its own address, localhost, "
                "127.0.0.1 or a name given with --allowed-host\n", 421)
        elif self._password:
            refusal = self._authenticate(headers.get("authorization"))
        elif self._read_only and scope["method"] not in {"GET", "HEAD"}:
            refusal = PlainTextResponse(self._read_only + "\n", 403)
        if refusal is not None:
            await refusal(scope, receive, with_headers)
            return
        await self._app(scope, receive, with_headers)

    def _authenticate(self, header: str | None) -> PlainTextResponse | None:
        """None for the right password; 401 asks for it (a wrong one counts), 429 while too
        many wrong ones were given lately."""
        assert self._password is not None
        wait = self._throttle.wait() if header else 0.0
        if wait > 0:
            return PlainTextResponse(
                "too many wrong passwords lately: try again in a minute\n", 429,
                headers={"Retry-After": str(max(1, math.ceil(wait)))})
        if authorised(header, self._password):
            return None
        if header:
            self._throttle.failed()
        return PlainTextResponse("authentication required (user outbox)\n", 401, headers={
            "WWW-Authenticate": 'Basic realm="outbox", charset="UTF-8"'})
