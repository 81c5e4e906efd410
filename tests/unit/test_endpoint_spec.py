"""EndpointSpec validation, glob -> LIKE translation and secret decoding: pure, no database."""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path
from typing import Any

import pytest

from outbox._event import Event, build_batch
from outbox.endpoints import (
    EndpointSpec,
    decode_secret,
    generate_secret,
    glob_to_like,
    parse_header,
    signing_label,
)
from outbox.errors import InvalidEndpoint, InvalidEvent, OutboxError

URL = "https://hooks.example.com/events"
# The Standard Webhooks test vector's secret: a 24-byte key.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SCHEMA = Path(__file__).resolve().parents[2] / "outbox" / "sql" / "schema.sql"


def spec(**options: Any) -> EndpointSpec:
    options.setdefault("name", "hooks")
    options.setdefault("url", URL)
    return EndpointSpec(**options)


def b64(size: int) -> str:
    return base64.b64encode(bytes(range(size))).decode()


def test_defaults_match_the_schema_column_defaults() -> None:
    """A spec with no options stores exactly what the table would default to."""
    text = SCHEMA.read_text()

    def default(column: str) -> float:
        match = re.search(rf"\n\s+{column}\s+\w+(?: \w+)? NOT NULL DEFAULT (\d+)", text)
        assert match, column
        return float(match.group(1))

    s = spec()
    assert s.max_attempts == default("max_attempts")
    assert s.timeout == default("timeout_seconds")
    assert s.min_backoff == default("min_backoff_seconds")
    assert s.max_backoff == default("max_backoff_seconds")
    assert s.max_in_flight == default("max_in_flight")
    assert s.max_batch == default("max_batch")
    assert s.breaker_failures == default("breaker_failures")
    assert s.breaker_cooldown == default("breaker_cooldown_seconds")
    assert s.breaker_window == default("breaker_window_seconds")
    assert s.breaker_rate == default("breaker_rate")
    assert s.rate_limit is None
    assert s.format == "standard-webhooks"
    assert "DEFAULT 'standard-webhooks'" in text
    assert s.events == ("*",)
    assert s.events_like == ("%",)
    assert s.secret is None
    assert s.headers == {}


def test_invalid_endpoint_is_an_outbox_error_and_a_value_error() -> None:
    """InvalidEndpoint sits in the package's exception tree and is a ValueError."""
    with pytest.raises(InvalidEndpoint) as info:
        spec(name="")
    assert isinstance(info.value, OutboxError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", ["hooks", "a", "billing-v2", "x.y_z", "Workflow", "9" * 63])
def test_valid_names(name: str) -> None:
    """Names of letters, digits, '_', '.', '-' up to 63 characters are accepted."""
    assert spec(name=name).name == name


@pytest.mark.parametrize("name", ["", "-x", ".x", "has space", "a" * 64, "ünï", "a/b", "a:b"])
def test_invalid_names(name: str) -> None:
    """Empty, too long, or oddly spelt names are refused, naming the field."""
    with pytest.raises(InvalidEndpoint, match="not a valid endpoint name") as info:
        spec(name=name)
    assert info.value.field == "name"


@pytest.mark.parametrize("url", [
    URL, "http://127.0.0.1:8080/", "http://[::1]:9000/x", "https://example.com/p?q=1&r=2",
    "http://localhost", "HTTPS://Example.COM/Path", "https://bücher.example/",
    "http://workflow.internal:8080/api/events",
])
def test_valid_urls(url: str) -> None:
    """Absolute http and https URLs with a host are accepted unchanged."""
    assert spec(url=url).url == url


@pytest.mark.parametrize(("url", "message"), [
    ("", "is required"),
    ("ftp://example.com/x", "http:// or https://"),
    ("example.com/events", "http:// or https://"),
    ("javascript:alert(1)", "http:// or https://"),
    ("https://", "must name a host"),
    ("http:///path", "must name a host"),
    ("https://user:pw@example.com/", "Authorization"),
    ("https://token@example.com/", "user name or password"),
    ("https://example.com/#frag", "fragment"),
    ("https://example.com/a b", "spaces"),
    ("https://exa\nmple.com/", "control characters"),
    ("https://example.com/\x00", "control characters"),
    ("https://example.com\\@evil.com/", "backslashes"),
    ("http://example.com:99999/", "port that is not a number"),
    ("http://example.com:abc/", "port that is not a number"),
    ("http://[::1/", "not a valid URL"),
    ("http://[not-ip]/", "not a valid URL"),
    ("http://exa<mple.com/", "invalid host"),
    ("http://example..com/", "invalid host"),
    ("http://example.com:0/", "port 0"),
    ("http://xn--/", "invalid host"),  # accepted once, then failed every attempt
    ("http://xn--zz.example/", "invalid host"),
    ("http://" + "a" * 64 + ".example/", "invalid host"),
    ("http://" + ("a" * 60 + ".") * 5 + "example/", "invalid host"),  # 300 characters
    ("https://example.com/" + "x" * 2048, "longer than"),
    ("https://example.com/\udcff", "not valid UTF-8"),  # argv bytes that were not UTF-8
    ("https://example.com/\ud800x", "not valid UTF-8"),
])
def test_invalid_urls(url: str, message: str) -> None:
    """Each kind of bad URL is refused with a message saying what is wrong."""
    with pytest.raises(InvalidEndpoint, match=message) as info:
        spec(url=url)
    assert info.value.field == "url"


def test_url_credentials_are_not_echoed() -> None:
    """A URL carrying a password is refused without repeating it."""
    with pytest.raises(InvalidEndpoint) as info:
        spec(url="https://user:hunter2@example.com/")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("url", [
    "ftp://user:PASSW0RD@example.com/x",  # the scheme is wrong too: credentials said first
    "http://admin:PASSW0RD/",  # no @: read as a port, which must not be echoed either
    "http://admin:PASSW0RD@[::1/",  # malformed too
    "gopher://example.com/?token=PASSW0RD",
    "http://example.com:99999/?token=PASSW0RD",
    "http://example.com/?token=PASSW0RD#x",
])
def test_no_url_error_repeats_a_password_or_query_value(url: str) -> None:
    """Whatever else is wrong with the URL, its password, port text and query values stay out."""
    with pytest.raises(InvalidEndpoint) as info:
        spec(url=url)
    assert "PASSW0RD" not in str(info.value)


@pytest.mark.parametrize("host", ["a" * 63 + ".example", "xn--bcher-kva.example", "bücher.de"])
def test_hosts_the_idna_codec_sends_are_accepted(host: str) -> None:
    """63-character labels and well-formed A-labels (or their Unicode form) are accepted."""
    assert spec(url=f"https://{host}/").url == f"https://{host}/"


@pytest.mark.parametrize("patterns", [
    ["*"], ["mail.*"], ["order.created"], ["a?c"], ["com.example:order/created"],
    ["*.created", "mail.*"], ["snake_case.Event-1"], "mail.*",
])
def test_valid_patterns(patterns: Any) -> None:
    """Globs over the event type charset, one or several, are accepted."""
    expected = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    assert spec(events=patterns).events == expected


@pytest.mark.parametrize("patterns", [
    [], [""], ["mail..x"], [".mail"], ["mail."], ["mail received"], ["mail.%"],
    ["a[b]"], ["a\\b"], [5], ["x" * 256], None,
])
def test_invalid_patterns(patterns: Any) -> None:
    """Empty lists, empty segments, spaces and foreign characters are refused."""
    with pytest.raises(InvalidEndpoint) as info:
        spec(events=patterns)
    assert info.value.field == "events"


@pytest.mark.parametrize(("glob", "like"), [
    ("*", "%"),
    ("mail.*", "mail.%"),
    ("order.created", "order.created"),
    ("a?c", "a_c"),
    ("a_b.*", "a\\_b.%"),
    ("**", "%"),
    ("*.x.*", "%.x.%"),
    ("x%y", "x\\%y"),
    ("a\\b", "a\\\\b"),
])
def test_glob_to_like(glob: str, like: str) -> None:
    """'*' becomes '%', '?' becomes '_', and LIKE's own '%', '_', '\\' are escaped."""
    assert glob_to_like(glob) == like


def test_spec_carries_both_pattern_forms() -> None:
    """A spec stores the globs as written and their LIKE forms, in order."""
    columns = spec(events=["mail.*", "a_b"]).columns()
    assert columns["events"] == ["mail.*", "a_b"]
    assert columns["events_like"] == ["mail.%", "a\\_b"]


@pytest.mark.parametrize("secret", [
    SECRET, "whsec_" + b64(64), "whsec_" + b64(32).rstrip("="), "whsec_" + b64(25),
    "env:OUTBOX_SECRET_WEBHOOK", "env:OUTBOX_SECRET_x1", "env:WORKFLOW_WEBHOOK_SECRET",
    "env:outbox_dsn", None,
])
def test_valid_secrets(secret: str | None) -> None:
    """whsec_ secrets with 24..64-byte keys (padding optional) and env: names outside the
    configuration's are accepted."""
    assert spec(secret=secret).secret == secret


@pytest.mark.parametrize(("secret", "message"), [
    ("hunter2", "whsec_"),
    ("whsec_", "0-byte key"),
    ("whsec_!!!!", "not base64"),
    ("whsec_" + b64(16), "16-byte key"),
    ("whsec_" + b64(65), "65-byte key"),
    ("env:", "environment variable name"),
    ("env:1BAD", "environment variable name"),
    ("env:A-B", "environment variable name"),
    ("ENV:X", "whsec_"),
    ("env:OUTBOX_DSN", "is not allowed"),
    ("env:OUTBOX_LOG_LEVEL", "is not allowed"),
    ("env:DATABASE_URL", "is not allowed"),
    ("env:PGPASSWORD", "is not allowed"),
    ("env:PGSERVICEFILE", "is not allowed"),
    ("env:OUTBOX_SECRET_", "is not allowed"),
])
def test_invalid_secrets(secret: str, message: str) -> None:
    """Malformed secrets are refused, saying what a secret looks like, never echoing a key.

    An env: reference is named (it is a variable's name, shown by `list` too).
    """
    with pytest.raises(InvalidEndpoint, match=message) as info:
        spec(secret=secret)
    assert info.value.field == "secret"
    if not secret.startswith("env:") and len(secret) > 8:
        assert secret[6:] not in str(info.value)


def test_decode_secret_whsec() -> None:
    """A whsec_ secret decodes to its base64 key bytes."""
    assert decode_secret(SECRET, {}) == base64.b64decode(SECRET[6:])


@pytest.mark.parametrize("value", [SECRET, SECRET + "\n", " " + SECRET])
def test_decode_secret_env(value: str) -> None:
    """env:NAME reads the given mapping: a whsec_ secret, surrounding whitespace ignored."""
    key = decode_secret("env:OUTBOX_SECRET_HOOK", {"OUTBOX_SECRET_HOOK": value})
    assert key == base64.b64decode(SECRET[6:])


def test_decode_secret_env_contract_example() -> None:
    """The documented example, a name outside OUTBOX_SECRET_*, works as it is."""
    key = decode_secret("env:WORKFLOW_WEBHOOK_SECRET", {"WORKFLOW_WEBHOOK_SECRET": SECRET})
    assert key == base64.b64decode(SECRET[6:])


@pytest.mark.parametrize("environ", [{}, {"OUTBOX_SECRET_HOOK": ""}, {"OTHER": SECRET}])
def test_decode_secret_env_missing(environ: dict[str, str]) -> None:
    """A missing or empty variable is a clear error naming it."""
    with pytest.raises(InvalidEndpoint, match=r"no variable OUTBOX_SECRET_HOOK holding"):
        decode_secret("env:OUTBOX_SECRET_HOOK", environ)


@pytest.mark.parametrize(("name", "value"), [
    ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),  # 30 bytes of base64
    ("POSTGRES_PASSWORD", "c2VjcmV0LXBhc3N3b3JkLXRoaXJ0eS1ieXRlcyE="),
    ("OUTBOX_SECRET_HOOK", SECRET[6:]),  # bare base64: no longer enough
])
def test_decode_secret_env_needs_the_whsec_form(name: str, value: str) -> None:
    """A variable not holding whsec_... never signs, and the error is the one of a missing
    variable: it tells nothing of what the environment holds, neither value nor length."""
    with pytest.raises(InvalidEndpoint) as info:
        decode_secret(f"env:{name}", {name: value})
    with pytest.raises(InvalidEndpoint) as missing:
        decode_secret(f"env:{name}", {})
    assert str(info.value) == str(missing.value)
    assert value not in str(info.value)
    assert not re.search(r"\d+-byte", str(info.value))


@pytest.mark.parametrize("value", ["whsec_c2hvcnRrZXk=", "whsec_" + b64(65), "whsec_!!"])
def test_decode_secret_env_invalid_value_not_echoed(value: str) -> None:
    """A variable holding a bad whsec_ key is refused without its value or its length."""
    with pytest.raises(InvalidEndpoint, match="OUTBOX_SECRET_HOOK") as info:
        decode_secret("env:OUTBOX_SECRET_HOOK", {"OUTBOX_SECRET_HOOK": value})
    assert value[6:] not in str(info.value)
    assert not re.search(r"\d+-byte", str(info.value))


@pytest.mark.parametrize("name", ["OUTBOX_DSN", "DATABASE_URL", "PGPASSWORD"])
def test_decode_secret_refuses_the_configurations_names(name: str) -> None:
    """A hand-written env: name of the configuration is refused though the variable is set.

    Its value would make a valid key (the DSN is long enough): the refusal must
    come from the name alone, and must not show the value.
    """
    value = "whsec_" + b64(32)
    with pytest.raises(InvalidEndpoint, match=f"env:{name} is not allowed") as info:
        decode_secret(f"env:{name}", {name: value})
    assert value[6:] not in str(info.value)


@pytest.mark.parametrize("text", ["plain", "whsec_abc", "env:bad-name"])
def test_decode_secret_rejects_malformed(text: str) -> None:
    """decode_secret refuses what the spec would refuse."""
    with pytest.raises(InvalidEndpoint):
        decode_secret(text, {})


def test_generate_secret() -> None:
    """Generated secrets are whsec_ with 32 random bytes, and valid."""
    one, two = generate_secret(), generate_secret()
    assert one != two
    assert len(decode_secret(one, {})) == 32
    assert spec(secret=one).secret == one


def test_signing_label_never_shows_a_key() -> None:
    """A secret is shown as its kind: 'whsec', the env reference, or None."""
    assert signing_label(SECRET) == "whsec"
    assert signing_label("env:HOOK") == "env:HOOK"
    assert signing_label(None) is None


def test_parse_header() -> None:
    """NAME:VALUE splits on the first colon and trims the spaces around the value."""
    assert parse_header("Authorization: Bearer a:b") == ("Authorization", "Bearer a:b")
    assert parse_header("X-Empty:") == ("X-Empty", "")


@pytest.mark.parametrize("text", ["NoColon", ": value", "  : x"])
def test_parse_header_malformed(text: str) -> None:
    """Text without NAME:VALUE shape is refused."""
    with pytest.raises(InvalidEndpoint, match="NAME:VALUE"):
        parse_header(text)


def test_headers_are_lower_cased() -> None:
    """Header names are stored lower-case, values trimmed."""
    assert spec(headers={"X-Tenant": " acme "}).headers == {"x-tenant": "acme"}


@pytest.mark.parametrize(("headers", "message"), [
    ({"Bad Name": "x"}, "not a valid HTTP header name"),
    ({"": "x"}, "not a valid HTTP header name"),
    ({"Content-Type": "text/plain"}, "set by the dispatcher"),
    ({"content-length": "1"}, "set by the dispatcher"),
    ({"Host": "evil"}, "set by the dispatcher"),
    ({"Connection": "close"}, "set by the dispatcher"),
    ({"Transfer-Encoding": "chunked"}, "set by the dispatcher"),
    ({"webhook-id": "x"}, "set by the dispatcher"),
    ({"Webhook-Signature": "v1,x"}, "set by the dispatcher"),
    ({"ce-type": "x"}, "set by the dispatcher"),
    ({"X-A": "a\r\nInjected: yes"}, "line breaks"),
    ({"X-A": "a\nb"}, "line breaks"),
    ({"X-A": "a\x00b"}, "control characters"),
    ({"X-A": "a\x7f"}, "control characters"),
    ({"X-A": "café"}, "printable ASCII"),
    ({"X-A": "a\u00a0b"}, "printable ASCII"),
    ({"X-A": "✓"}, "printable ASCII"),
    ({"X-A": "lone \udc80"}, "printable ASCII"),
    ({"X-A": "v" * 8193}, "longer than 8192"),
    ({"X-A": 5}, "string value"),
    ({"X-A": "1", "x-a": "2"}, "given twice"),
    ("X-A: 1", "must map header names"),
])
def test_invalid_headers(headers: Any, message: str) -> None:
    """Bad names, reserved names, values that are not printable ASCII, duplicates: refused."""
    with pytest.raises(InvalidEndpoint, match=message) as info:
        spec(headers=headers)
    assert info.value.field == "headers"


@pytest.mark.parametrize("value", ["plain", "a\tb", "", "~!@#$%^&*()_+{}|:<>?", "é", "a\rb",
                                   "\u00a0", "x" * 8192, "x" * 8193])
def test_header_values_follow_the_rule_of_publish(value: str) -> None:
    """An endpoint header value is accepted exactly when publish(headers=...) accepts it."""
    try:
        build_batch([Event("t", {}, headers={"x-a": value})])
    except InvalidEvent:
        published = False
    else:
        published = True
    try:
        spec(headers={"x-a": value})
    except InvalidEndpoint:
        configured = False
    else:
        configured = True
    assert configured == published


def test_non_ascii_header_value_is_not_echoed() -> None:
    """The refusal names the character's code point, not the value (often a credential)."""
    with pytest.raises(InvalidEndpoint, match=r"character 8 is U\+2019") as info:
        spec(headers={"X-Api-Key": "abc-def\u2019ghijkl"})
    assert "ghijkl" not in str(info.value)


@pytest.mark.parametrize(("option", "value"), [
    ("max_attempts", 0), ("max_attempts", 101), ("max_attempts", 1.5), ("max_attempts", True),
    ("max_attempts", "3"),
    ("timeout", 0), ("timeout", -1), ("timeout", 301), ("timeout", math.nan),
    ("timeout", math.inf), ("timeout", False),
    pytest.param("timeout", 10**400, id="timeout-10^400"),  # beyond any float
    pytest.param("timeout", -(10**400), id="timeout--10^400"),
    ("min_backoff", -1), ("min_backoff", 86401),
    ("max_backoff", 0), ("max_backoff", 86401),
    ("max_in_flight", 0), ("max_in_flight", 1001),
    ("rate_limit", 0), ("rate_limit", -1), ("rate_limit", 1e9),
    pytest.param("rate_limit", 10**400, id="rate_limit-10^400"),
    ("max_batch", 0), ("max_batch", 1001),
    ("breaker_failures", -1), ("breaker_failures", 1001), ("breaker_failures", 2.5),
    ("breaker_cooldown", 0), ("breaker_cooldown", 86401), ("breaker_cooldown", math.nan),
    ("breaker_window", 0), ("breaker_window", -1), ("breaker_window", math.inf),
    ("breaker_rate", 0), ("breaker_rate", 0.5), ("breaker_rate", 101), ("breaker_rate", True),
    ("breaker_rate", math.nan),
    ("max_pending", 0), ("max_pending", -5), ("max_pending", 1.5), ("max_pending", True),
    ("max_pending_per_tenant", 0), ("max_pending_per_tenant", -1),
    ("max_pending_per_tenant", 1.5), ("max_pending_per_tenant", True),
    ("max_pending_per_tenant", 1_000_000_001),
    ("format", "json"), ("format", None),
])
def test_invalid_numbers_and_format(option: str, value: Any) -> None:
    """Out-of-range, non-numeric and boolean values are refused, naming the option."""
    with pytest.raises(InvalidEndpoint) as info:
        spec(**{option: value})
    assert info.value.field == option


@pytest.mark.parametrize(("option", "value"), [
    ("max_attempts", 1), ("max_attempts", 100), ("timeout", 0.5), ("timeout", 300),
    ("min_backoff", 0), ("max_backoff", 86400), ("max_in_flight", 1000),
    ("rate_limit", 0.5), ("max_batch", 1000), ("format", "cloudevents"),
])
def test_boundary_values_accepted(option: str, value: Any) -> None:
    """Values at the edges of each range are accepted."""
    assert getattr(spec(**{option: value}), option) == value


@pytest.mark.parametrize("value", [None, 1, 1_000_000_000])
def test_max_pending_per_tenant_takes_what_max_pending_takes(value: int | None) -> None:
    """max_pending_per_tenant: None (no bound) or 1 up to max_pending's own upper bound."""
    assert spec(max_pending_per_tenant=value).max_pending_per_tenant == value
    assert spec(max_pending=value).max_pending == value


def test_max_pending_per_tenant_is_a_column_and_read_from_text() -> None:
    """The bound reaches the column of its name, and text such as a sync file's is a number."""
    s = EndpointSpec.from_options("hooks", {"url": URL, "max_pending_per_tenant": " 50 "})
    assert s.max_pending_per_tenant == 50
    assert s.columns()["max_pending_per_tenant"] == 50
    assert spec().columns()["max_pending_per_tenant"] is None
    with pytest.raises(InvalidEndpoint, match="must be a whole number, not 'x'") as info:
        EndpointSpec.from_options("hooks", {"url": URL, "max_pending_per_tenant": "x"})
    assert info.value.field == "max_pending_per_tenant"


def test_min_backoff_must_not_exceed_max_backoff() -> None:
    """min_backoff above max_backoff is refused, with both values in the message."""
    with pytest.raises(InvalidEndpoint, match=r"min_backoff \(30 s\).*max_backoff \(5 s\)"):
        spec(min_backoff=30, max_backoff=5)


def test_from_options_coerces_text() -> None:
    """Text options become numbers; seconds options also take durations such as 2m."""
    s = EndpointSpec.from_options("hooks", {
        "url": URL, "timeout": "30s", "min_backoff": "0.5", "max_backoff": "2m",
        "max_attempts": "12", "rate_limit": "2.5", "max_batch": "10", "max_in_flight": "4",
    })
    assert (s.timeout, s.min_backoff, s.max_backoff) == (30.0, 0.5, 120.0)
    assert (s.max_attempts, s.rate_limit, s.max_batch, s.max_in_flight) == (12, 2.5, 10, 4)


@pytest.mark.parametrize(("option", "value"), [
    ("max_attempts", "twelve"), ("timeout", "soon"), ("rate_limit", "fast"),
    ("max_batch", "1.5"), ("timeout", "1e300"), ("breaker_cooldown", "99999999999999999999d"),
])
def test_from_options_refuses_bad_text(option: str, value: str) -> None:
    """Text that is not a number is refused, naming the option."""
    with pytest.raises(InvalidEndpoint) as info:
        EndpointSpec.from_options("hooks", {"url": URL, option: value})
    assert info.value.field == option


def test_from_options_refuses_unknown_keys() -> None:
    """An unknown option is refused by its name."""
    with pytest.raises(InvalidEndpoint, match="is not a known option") as info:
        EndpointSpec.from_options("hooks", {"url": URL, "max_retries": 3})
    assert info.value.field == "max_retries"


# -- an endpoint's own TLS files ---------------------------------------------------------

def test_tls_files_are_absolute_paths_given_as_a_pair_for_https() -> None:
    """ca_file alone, or client_cert with client_key, on an https:// URL: kept as written."""
    spec = EndpointSpec("a", "https://h.test/", ca_file="/etc/tls/ca.pem",
                        client_cert="/etc/tls/c.pem", client_key="/etc/tls/c.key")
    assert (spec.columns()["ca_file"], spec.columns()["client_key"]) == (
        "/etc/tls/ca.pem", "/etc/tls/c.key")
    assert EndpointSpec("a", "https://h.test/").columns()["client_cert"] is None


@pytest.mark.parametrize(("options", "message"), [
    ({"ca_file": "ca.pem"}, "must be an absolute path"),
    ({"ca_file": ""}, "must be the path of a file"),
    ({"ca_file": "/etc/ca\n.pem"}, "without control characters"),
    ({"ca_file": "/etc/\udcff.pem"}, "not valid UTF-8"),
    ({"client_cert": "/c.pem"}, "client_cert and client_key are given together"),
    ({"client_key": "/c.key"}, "client_cert and client_key are given together"),
])
def test_tls_files_that_cannot_be_meant_are_refused(options: dict[str, str],
                                                    message: str) -> None:
    """Relative, empty, garbled, or half a pair: refused before anything is written."""
    with pytest.raises(InvalidEndpoint, match=message):
        EndpointSpec("a", "https://h.test/", **options)  # type: ignore[arg-type]


def test_tls_files_are_for_https_urls() -> None:
    """An http:// endpoint has no TLS to use them in."""
    with pytest.raises(InvalidEndpoint, match="are for https:// URLs"):
        EndpointSpec("a", "http://h.test/", ca_file="/etc/tls/ca.pem")


@pytest.mark.parametrize("tenant", ["acme", "a b~", "~" * 200, None])
def test_a_tenant_publish_accepts_is_the_endpoints_tenant(tenant: str | None) -> None:
    """An endpoint's tenant is any tenant publish() takes (None: none), kept as given."""
    assert spec(tenant=tenant).tenant == tenant
    assert spec(tenant=tenant).columns()["tenant"] == tenant
    build_batch([Event("t", {}, tenant=tenant)])


@pytest.mark.parametrize("tenant", ["", "x" * 201, "a\tb", "a\nb", "caf\u00e9", "\x7f", 7])
def test_a_tenant_publish_refuses_is_refused_by_name(tenant: Any) -> None:
    """Empty, too long, not printable ASCII, not text: InvalidEndpoint naming tenant, as
    publish() raises InvalidEvent for it."""
    with pytest.raises(InvalidEndpoint) as raised:
        spec(tenant=tenant)
    assert raised.value.field == "tenant"
    with pytest.raises(InvalidEvent):
        build_batch([Event("t", {}, tenant=tenant)])
