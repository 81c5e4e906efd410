"""One checker per endpoint option: pure functions that return the clean value or raise.

They serve :class:`outbox.endpoints.EndpointSpec` (the command line and sync
files), so an endpoint is judged by the same rules wherever it comes from;
the secret's rules, which the dispatcher shares, are in
``outbox._shared.secrets``. Every failure is an
:class:`~outbox.errors.InvalidEndpoint` naming the option and saying what to
write instead; none repeats a secret.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from outbox._event import check_tenant as _event_tenant
from outbox._shared.headers import HEADER_NAME, is_reserved, value_problem
from outbox._shared.urls import shown_url
from outbox.errors import InvalidEndpoint, InvalidEvent

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_URL_MAX = 2048
_URL_BAD = re.compile(r"[\s\x00-\x1f\x7f\\]")
_HOST = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?")
_HOST_MAX = 253  # characters of a DNS name, dots included (RFC 1035)
# The event type charset of outbox._event, plus the glob characters * and ?.
_PATTERN = re.compile(r"[A-Za-z0-9_\-:/*?]+(?:\.[A-Za-z0-9_\-:/*?]+)*")
_PATTERN_MAX = 255


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidEndpoint(
            f"{name!r} is not a valid endpoint name: use 1 to 63 letters, digits, '_', '.' "
            "or '-', starting with a letter or digit", "name")
    return name


def check_url(url: object) -> str:
    """An absolute http(s) URL with a host, and nothing the dispatcher would mangle or leak.

    Credentials are looked for first, and no message repeats the URL but as
    ``shown_url`` masks it (query values, user information), nor its port
    when that is not a number (``http://admin:S3cret/`` is a password, not a
    port). A host name must pass the IDNA codec that the dispatcher's lookups
    encode it with, both ways: a name it cannot send (a label over 63
    characters, a malformed ``xn--`` label) is refused here, not at every
    attempt.
    """
    url = _check_url_text(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidEndpoint(f"{shown_url(url)!r} is not a valid URL", "url") from None
    if "@" in parts.netloc:
        # Not echoed: the part before the @ is a password more often than not.
        raise InvalidEndpoint(
            "must not contain a user name or password; send credentials in a header "
            "(Authorization) instead", "url")
    shown = repr(shown_url(url))
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidEndpoint("must start with http:// or https://", "url")
    if "#" in url:
        raise InvalidEndpoint(
            f"{shown} must not have a #fragment: it is never sent to the server", "url")
    try:
        port = parts.port
    except ValueError:
        raise InvalidEndpoint(
            f"{shown} has a port that is not a number from 1 to 65535", "url") from None
    host = parts.hostname or ""
    if not host:
        raise InvalidEndpoint(
            f"{shown} must name a host, such as https://hooks.example.com/events", "url")
    if not _valid_host(host, bracketed=parts.netloc.startswith("[")):
        raise InvalidEndpoint(f"{shown} has an invalid host name {host!r}", "url")
    if port == 0:
        raise InvalidEndpoint(f"{shown} has port 0; use a port from 1 to 65535", "url")
    return url


def _check_url_text(url: object) -> str:
    """A URL's text: given, not too long, no characters the wire would mangle."""
    if not isinstance(url, str) or not url:
        raise InvalidEndpoint("is required: the http:// or https:// address to POST to", "url")
    if len(url) > _URL_MAX:
        raise InvalidEndpoint(f"is longer than {_URL_MAX} characters", "url")
    if _URL_BAD.search(url):
        raise InvalidEndpoint(
            "must not contain spaces, backslashes or control characters "
            "(percent-encode them)", "url")
    if not url.isascii():
        try:
            url.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: argv bytes that were not UTF-8
            raise InvalidEndpoint("is not valid UTF-8 text", "url") from None
    return url


def _valid_host(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    try:
        # What socket.getaddrinfo sends (its "idna" codec), and back: a label of
        # 64 characters fails the first, a malformed xn-- label the second.
        ascii_host = host.encode("idna").decode("ascii")
        ascii_host.encode("ascii").decode("idna")
    except UnicodeError:
        return False
    return (len(ascii_host.rstrip(".")) <= _HOST_MAX
            and _HOST.fullmatch(ascii_host.lower()) is not None)


def check_patterns(patterns: object) -> tuple[str, ...]:
    """Glob patterns over event types: ``*`` any run of characters (dots too), ``?`` one."""
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, Sequence) or not patterns:
        raise InvalidEndpoint(
            "must list at least one pattern, such as 'mail.*' or '*' (everything); "
            "to receive nothing, disable the endpoint", "events")
    clean: list[str] = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise InvalidEndpoint(
                f"must hold strings, not {type(pattern).__name__}", "events")
        if len(pattern) > _PATTERN_MAX:
            raise InvalidEndpoint(
                f"pattern is longer than {_PATTERN_MAX} characters", "events")
        if not _PATTERN.fullmatch(pattern):
            raise InvalidEndpoint(
                f"pattern {pattern!r} is malformed: use event-type words separated by dots, "
                "'*' for any run of characters and '?' for one, such as 'mail.*'", "events")
        clean.append(pattern)
    return tuple(clean)


def glob_to_like(pattern: str) -> str:
    """The LIKE pattern matching exactly the event types the glob matches.

    LIKE's own wildcards and its escape character (backslash, PostgreSQL's
    default) are escaped first, so that a literal ``_`` in a type (legal in
    event types) matches only ``_``.
    """
    out: list[str] = []
    for char in pattern:
        if char == "*":
            if not out or out[-1] != "%":
                out.append("%")
        elif char == "?":
            out.append("_")
        elif char in "%_\\":
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def check_headers(headers: object) -> dict[str, str]:
    """Extra request headers, names lower-cased; none the dispatcher sets itself.

    Values follow the rule ``publish(headers=...)`` follows (printable ASCII,
    one line, at most 8 KiB), so what one side accepts the other does too.
    """
    if not isinstance(headers, Mapping):
        raise InvalidEndpoint("must map header names to string values", "headers")
    clean: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise InvalidEndpoint(f"{name!r} is not a valid HTTP header name", "headers")
        lowered = name.lower()
        if is_reserved(lowered):
            raise InvalidEndpoint(
                f"{name!r} is set by the dispatcher itself and cannot be configured", "headers")
        if lowered in clean:
            raise InvalidEndpoint(f"{name!r} is given twice", "headers")
        if not isinstance(value, str):
            raise InvalidEndpoint(f"{name!r} must have a string value", "headers")
        problem = value_problem(value)
        if problem:
            raise InvalidEndpoint(f"{name!r} {problem}", "headers")
        clean[lowered] = value.strip(" \t")
    return clean


_PATH_MAX = 4096  # PATH_MAX on Linux
_PATH_BAD = re.compile(r"[\x00-\x1f\x7f]")


def check_path(path: object, field: str) -> str | None:
    """An absolute path of a file the dispatcher reads (None: not given).

    Absolute, since the dispatcher's working directory is not the
    operator's; no control characters, which no mounted Secret's path
    holds and which would garble every message that names the file.
    """
    if path is None:
        return None
    if not isinstance(path, str) or not path:
        raise InvalidEndpoint("must be the path of a file on the dispatcher's filesystem",
                              field)
    if len(path) > _PATH_MAX or _PATH_BAD.search(path):
        raise InvalidEndpoint(f"must be a path of at most {_PATH_MAX} characters without "
                              "control characters", field)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: argv bytes that were not UTF-8
        raise InvalidEndpoint("is not valid UTF-8 text", field) from None
    if not path.startswith("/"):
        raise InvalidEndpoint(f"must be an absolute path (such as /etc/outbox/tls/{field}.pem), "
                              f"not {path!r}: the dispatcher's working directory is not "
                              "this one", field)
    return path


def check_int(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidEndpoint(f"must be a whole number from {low} to {high}, not {value!r}",
                              field)
    return value


def check_number(value: object, field: str, low: float, high: float, *,
                 low_inclusive: bool, unit: str = "seconds") -> float:
    # The range first: an int too large for a float fails it before isfinite
    # would raise OverflowError converting it.
    ok = (isinstance(value, int | float) and not isinstance(value, bool)
          and value <= high and (value >= low if low_inclusive else value > low)
          and math.isfinite(value))
    if not ok:
        bound = f"from {low:g}" if low_inclusive else f"more than {low:g}"
        raise InvalidEndpoint(f"must be a number of {unit} {bound} up to {high:g}, "
                              f"not {value!r}", field)
    return float(value)  # type: ignore[arg-type]


def check_tenant(tenant: object) -> str | None:
    """The tenant an endpoint belongs to (None: none), as publish() takes an event's:
    1 to 200 printable ASCII characters, a tenant that events can carry."""
    try:
        return _event_tenant(tenant)
    except InvalidEvent as exc:
        raise InvalidEndpoint(str(exc).removeprefix("tenant "), "tenant") from None


MAX_DESCRIPTION = 200
"""Characters a description may hold: a label, not a document."""


def check_description(description: object) -> str | None:
    """The customer's own label for an endpoint (None: none): printable text (letters of
    any script, no control characters or line breaks), at most 200 characters."""
    if description is None:
        return None
    if not isinstance(description, str):
        raise InvalidEndpoint(f"must be text, not {type(description).__name__}", "description")
    if len(description) > MAX_DESCRIPTION or not description.isprintable():
        raise InvalidEndpoint(f"must be at most {MAX_DESCRIPTION} printable characters, on "
                              "one line", "description")
    return description


def parse_header(text: str) -> tuple[str, str]:
    """``NAME:VALUE`` (as ``--header`` takes it) -> (name, value), surrounding spaces dropped."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        # The text is not echoed: it may well be an Authorization header.
        raise InvalidEndpoint("must be NAME:VALUE, such as 'Authorization: Bearer ...'",
                              "header")
    return name.strip(), value.strip(" \t")
