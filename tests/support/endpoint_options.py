"""Generated endpoint options, as a sync file or the command line gives them, valid and not.

Shared by the property tests of ``EndpointSpec.from_options`` (stored and
read back on a real database) and of the sync file parser. Each option is
drawn from the values the documented rules accept or, for a few options, from
odd ones; :class:`Options` says whether every value was a good one, so that
a test can insist such options are accepted. ``toml=True`` keeps to what a
TOML document can hold (no None, no objects, no lone surrogates).
"""

from __future__ import annotations

import base64
import string
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

from hypothesis import strategies as st

from outbox._shared.headers import MAX_VALUE, RESERVED
from outbox.endpoints import FORMATS, env_name_allowed
from tests.support.strategies import ANY_CHAR, any_text

_HOST = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,12}[a-z0-9])?(\.[a-z0-9]{1,8}){0,3}",
                      fullmatch=True)
_PATH = st.from_regex(r"(/[A-Za-z0-9._~%-]{0,10}){0,3}(\?[a-z]=[a-z0-9]{0,5})?", fullmatch=True)
_URLS = st.builds(
    lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
    st.sampled_from(["http", "https", "HTTPS"]),
    st.one_of(_HOST, st.just("127.0.0.1"), st.just("[::1]"), st.just("bücher.example")),
    st.one_of(st.just(""), st.integers(1, 65535).map(lambda port: f":{port}")),
    _PATH)
_PATTERN = st.from_regex(r"[A-Za-z0-9_\-:/*?]+(\.[A-Za-z0-9_\-:/*?]+)*", fullmatch=True).filter(
    lambda pattern: len(pattern) <= 255)
_SECRETS = st.one_of(
    st.builds(lambda key, pad: "whsec_" + (base64.b64encode(key).decode()
                                           if pad else base64.b64encode(key).decode().rstrip("=")),
              st.binary(min_size=24, max_size=64), st.booleans()),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
    .filter(env_name_allowed).map(lambda name: f"env:{name}"),
    st.from_regex(r"OUTBOX_SECRET_[A-Z0-9_]{1,10}", fullmatch=True).map(lambda n: f"env:{n}"))
_HEADER_NAMES = st.from_regex(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,30}", fullmatch=True).filter(
    lambda name: name.lower() not in RESERVED
    and not name.lower().startswith(("webhook-", "ce-")))
_HEADER_VALUES = st.one_of(st.text(st.sampled_from(string.printable[:95] + "\t"), max_size=60),
                           st.just("v" * MAX_VALUE))
_HEADERS = st.lists(st.tuples(_HEADER_NAMES, _HEADER_VALUES), max_size=3,
                    unique_by=lambda pair: pair[0].lower()).map(dict)


def _whole(low: int, high: int) -> st.SearchStrategy[Any]:
    """A whole number in range, as a number or as text (``"12"``)."""
    numbers = st.integers(low, high)
    return st.one_of(numbers, numbers.map(str))


def _seconds(low: float, high: float) -> st.SearchStrategy[Any]:
    """Seconds in (low, high]: a number, a number as text, or a duration such as ``90s``."""
    whole = st.integers(max(1, int(low) + 1), int(high))
    return st.one_of(
        st.floats(low, high, exclude_min=True), whole,
        whole.map(str), whole.map(lambda n: f"{n}s"),
        st.integers(1, int(high) // 60).map(lambda n: f"{n}m"),
        st.integers(1, int(high * 1000)).map(lambda n: f"{n}ms"))


def seconds_of(value: Any) -> float:
    """What a good seconds value above stands for."""
    if isinstance(value, str):
        for unit, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
            if value.endswith(unit) and value[: -len(unit)].isdigit():
                return int(value[: -len(unit)]) * factor
    return float(value)


GOOD: dict[str, st.SearchStrategy[Any]] = {
    "url": _URLS,
    "events": st.one_of(_PATTERN, st.lists(_PATTERN, min_size=1, max_size=3)),
    "secret": _SECRETS,
    "max_attempts": _whole(1, 100),
    "timeout": _seconds(0, 300),
    "max_in_flight": _whole(1, 1000),
    "rate_limit": st.one_of(st.floats(0, 100_000, exclude_min=True),
                            st.integers(1, 100_000).map(str)),
    "max_batch": _whole(1, 1000),
    "format": st.sampled_from(FORMATS),
    "headers": _HEADERS,
    "breaker_failures": _whole(0, 1000),
    "breaker_cooldown": _seconds(0, 86400),
    "breaker_window": _seconds(0, 86400),
    "breaker_rate": st.one_of(st.floats(1, 100), st.integers(1, 100),
                              st.integers(1, 100).map(str)),
    "max_pending": _whole(1, 1_000_000_000),
    "max_pending_per_tenant": _whole(1, 1_000_000_000),
    "send_tracestate": st.booleans(),
    "tenant": st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1,
                      max_size=200),
}
# min_backoff and max_backoff are drawn together (the one must not exceed the other).
BACKOFFS = ("min_backoff", "max_backoff")
OPTION_NAMES = (*GOOD, *BACKOFFS)

_TOML_ODD = st.one_of(
    st.booleans(), st.integers(), st.floats(),
    st.integers(309, 400).map(lambda digits: 10**digits),  # beyond any float
    st.integers(309, 400).map(lambda digits: -(10**digits)),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=20),
    st.sampled_from(["", " ", "1e300", "1e400", "-5", "nan", "inf", " 12 ", "1_000", "٣",
                     "99999999999999999999d", "1h30m", "10x", "0", "0s", "-1s", "1.5",
                     "http://", "ftp://a/", "http://user:pw@a/", "http://a/#x",
                     "http://a:0/", "http://a:99999/", "http://[::1/", "whsec_", "env:",
                     "env:OUTBOX_DSN", "env:PGPASSWORD", "*", "mail..x", "cloudevents "]),
    st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=70)),
                    max_size=3),
    st.dates(), st.times(), st.datetimes())
_PYTHON_ODD = st.one_of(
    _TOML_ODD, st.none(), st.builds(object), st.binary(max_size=4),
    any_text(),
    st.sampled_from(["http://a/\ud800", "whsec_\udcff", "\udcff"]),
    st.tuples(st.text(max_size=3)), st.frozensets(st.text(max_size=3), max_size=2))



# Characters that checks of text tend to forget: lone surrogates (what Python makes of
# bytes that are not UTF-8 on a command line), C0 and C1 controls, Unicode spaces and
# line breaks, URL delimiters.
_ODD_CHARS = ["\ud800", "\udcff", "\x00", "\x1b", "\x7f", "\x80", "\x85", "\x9b", "\xa0",
              "\u2028", "\u202e", "\ufeff", " ", "\\", "é", "#", "@", "%", "?", "/", ":"]


def _near_misses(chars: st.SearchStrategy[str]) -> dict[str, st.SearchStrategy[Any]]:
    """Good values with something odd added: the cases a check is most likely to miss."""
    odd_text = any_text(chars, min_size=1, max_size=4)
    return {
        "url": st.one_of(st.builds(lambda url, odd: f"{url}/{odd}", _URLS, odd_text),
                         st.builds(lambda url, odd, cut: url[:cut] + odd + url[cut:],
                                   _URLS, odd_text, st.integers(0, 30))),
        "events": st.builds(lambda good, odd: [*good, odd], st.lists(_PATTERN, max_size=2),
                            st.one_of(odd_text, _PATTERN.map(lambda p: p + " "))),
        "secret": st.one_of(
            st.binary(max_size=80).map(lambda key: "whsec_" + base64.b64encode(key).decode()),
            odd_text.map(lambda odd: "whsec_" + odd), odd_text.map(lambda odd: "env:" + odd)),
        "headers": st.builds(lambda good, name, value: {**good, name: value}, _HEADERS,
                             st.one_of(_HEADER_NAMES, odd_text), st.one_of(
                                 _HEADER_VALUES, odd_text, st.just("v" * (MAX_VALUE + 1)))),
        "tenant": st.one_of(st.builds(lambda good, odd: good + odd, st.text(
            st.characters(min_codepoint=32, max_codepoint=126), max_size=10),
            odd_text.filter(lambda odd: not odd.isascii() or not odd.isprintable())),
            st.just(""), st.just("t" * 201)),
    }


_TOML_NEAR = _near_misses(st.one_of(
    st.sampled_from([c for c in _ODD_CHARS if not "\ud800" <= c <= "\udfff"]),
    st.characters(exclude_categories=("Cs",))))
_PYTHON_NEAR = _near_misses(st.one_of(st.sampled_from(_ODD_CHARS), ANY_CHAR))
# True about once in ten draws (integers would come out at their bounds far more often).
_ONE_IN_TEN = st.sampled_from([False] * 9 + [True])


@dataclass(frozen=True)
class Options:
    """Drawn options, and whether all of them are good ones (so that they must be accepted)."""

    values: dict[str, Any]
    good: bool


@st.composite
def options(draw: st.DrawFn, *, toml: bool = False, odd_option: str | None = None,
            good_only: bool = False) -> Options:
    """Some options (url nearly always), a few of them (often none) odd, unknown keys rarely.

    ``odd_option``: exactly that option is odd (often a near miss), the others good;
    ``good_only``: good options only, the url among them.
    """
    odd_values = _TOML_ODD if toml else _PYTHON_ODD
    odd: set[str] = set()
    if odd_option is not None:
        odd = {odd_option}
    elif not good_only:
        odd = draw(st.sets(st.sampled_from(OPTION_NAMES), max_size=2))
    given = draw(st.sets(st.sampled_from(sorted(GOOD)), max_size=6))
    if good_only or draw(_ONE_IN_TEN) is False:
        given.add("url")
    values = {name: draw(GOOD[name]) for name in sorted(given)}
    if draw(st.booleans()):
        low, high = sorted(draw(st.lists(_seconds(0, 86400), min_size=2, max_size=2)),
                           key=seconds_of)
        if draw(st.booleans()):
            low = draw(st.sampled_from([0, 0.0, "0"]))
        shown = draw(st.sampled_from((*BACKOFFS, "both")))
        # Left out, a bound keeps its default (1 s, 600 s): keep the pair in order.
        if shown != "max_backoff" and (shown == "both" or seconds_of(low) <= 600):
            values["min_backoff"] = low
        if shown != "min_backoff" and (shown == "both" or seconds_of(high) >= 1):
            values["max_backoff"] = high
    near = _TOML_NEAR if toml else _PYTHON_NEAR
    for name in sorted(odd):
        values[name] = draw(st.one_of(near[name], near[name], odd_values) if name in near
                            else odd_values)
    good = not odd and "url" in values
    if odd_option is None and not good_only and draw(_ONE_IN_TEN) and draw(st.booleans()):
        values[draw(st.text(max_size=12))] = draw(odd_values)
        good = False
    return Options(values, good)


ENDPOINT_NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", fullmatch=True)


def good_endpoint_name(name: str) -> bool:
    """1-63 letters, digits, '_', '.' or '-', starting with a letter or digit (docs/concepts.md)."""
    allowed = set(string.ascii_letters + string.digits + "_.-")
    return 1 <= len(name) <= 63 and name[0] not in "_.-" and set(name) <= allowed


def toml_value(value: Any) -> str:
    """``value`` written as a TOML value (tables inline), for the types TOML has."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_string(str(k))} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'

