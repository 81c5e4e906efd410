"""The outcome policy: one test per documented rule, attempts, Retry-After, last_error.

last_error is logged and shown: every way a receiver can echo a secret into it is
tested here, with what must stay readable.
"""

from __future__ import annotations

import base64
import html
import json
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from urllib.parse import quote, quote_plus, urlencode

import pytest

from dispatcher.policy.backoff import next_attempt_delay
from dispatcher.policy.model import AttemptResult, Delivery, Endpoint, ErrorKind, EventData
from dispatcher.policy.outcome import (
    MAX_ERROR_LENGTH,
    Outcome,
    classify,
    decide,
)
from dispatcher.policy.redact import REDACTED

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
ENDPOINT = Endpoint(id=1, name="e", url="http://127.0.0.1:9/", min_backoff=1.0, max_backoff=60.0)


def status(code: int, body: str = "", **headers: str) -> AttemptResult:
    """A response with a status."""
    return AttemptResult(status=code, headers=headers, body_excerpt=body)


def failure(kind: ErrorKind, error: str = "") -> AttemptResult:
    """An attempt that got no status."""
    return AttemptResult(error_kind=kind, error=error)


def middle() -> float:
    """Randomness without jitter."""
    return 0.5


@pytest.mark.parametrize(
    ("result", "action", "reason"),
    [
        pytest.param(status(200), "delivered", None, id="200 delivered"),
        pytest.param(status(204), "delivered", None, id="204 delivered"),
        pytest.param(failure("timeout", "no answer after 10s"), "retry", "timeout", id="timeout"),
        pytest.param(failure("connect", "connection refused"), "retry", "connect", id="connect"),
        pytest.param(status(408), "retry", "http_4xx", id="408 retried"),
        pytest.param(status(425), "retry", "http_4xx", id="425 retried"),
        pytest.param(status(429), "retry", "http_4xx", id="429 retried"),
        pytest.param(status(500), "retry", "http_5xx", id="500 retried"),
        pytest.param(status(503), "retry", "http_5xx", id="503 retried"),
        pytest.param(status(301), "dead", "other", id="301 not followed"),
        pytest.param(status(307), "dead", "other", id="307 not followed"),
        pytest.param(status(400), "dead", "http_4xx", id="400 permanent"),
        pytest.param(status(404), "dead", "http_4xx", id="404 permanent"),
        pytest.param(status(410), "dead", "http_4xx", id="410 gone"),
        pytest.param(failure("blocked", "10.0.0.5 is private"), "dead", "connect", id="blocked"),
        pytest.param(status(101), "retry", "other", id="1xx odd"),
        pytest.param(status(600), "retry", "other", id="600 odd"),
        pytest.param(failure("other", "malformed response"), "retry", "other", id="other error"),
        pytest.param(failure("internal", "no file descriptor left"), "retry", "other",
                     id="internal error"),
        pytest.param(AttemptResult(), "retry", "other", id="nothing at all"),
    ],
)
def test_contract_rule(result: AttemptResult, action: str, reason: str | None) -> None:
    """Each documented rule of delivery gives its action and metric reason."""
    outcome = classify(result, 1, 10, NOW)
    assert (outcome.action, outcome.reason) == (action, reason)
    assert outcome.last_status == result.status
    assert outcome.disable_endpoint == (result.status == 410)
    assert (outcome.last_error is None) == (action == "delivered")


def test_success_has_no_error() -> None:
    """A 2xx is delivered with its status and nothing else."""
    assert classify(status(200), 3, 3, NOW) == Outcome("delivered", last_status=200)


@pytest.mark.parametrize("result", [status(503, "busy"), failure("timeout", "after 10s")])
def test_retryable_failure_on_the_last_attempt_is_dead(result: AttemptResult) -> None:
    """When the attempts run out a retryable failure is dead-lettered, keeping its error."""
    last = classify(result, 10, 10, NOW)
    earlier = classify(result, 9, 10, NOW)
    assert (earlier.action, last.action) == ("retry", "dead")
    assert last.reason == earlier.reason
    assert last.last_error == earlier.last_error
    assert last.last_status == result.status


def test_last_error_describes_the_answer() -> None:
    """last_error names the status and shows the start of the body."""
    assert classify(status(503, "down for maintenance"), 1, 5, NOW).last_error == (
        "HTTP 503: down for maintenance")
    assert classify(status(404), 1, 5, NOW).last_error == "HTTP 404"


NGINX_413 = ("<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
             "<center><h1>413 Request Entity Too Large</h1></center>\r\n"
             "<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n")


def test_last_error_names_the_reason_and_reads_an_html_page_as_text() -> None:
    """The status line's reason follows the status; an HTML page gives its text, one line."""
    result = AttemptResult(status=413, reason="Request Entity Too Large",
                           headers={"content-type": "text/html"}, body_excerpt=NGINX_413)
    assert classify(result, 1, 5, NOW).last_error == (
        "HTTP 413 Request Entity Too Large: 413 Request Entity Too Large nginx/1.22.1")


@pytest.mark.parametrize(("body", "text"), [
    pytest.param("<!DOCTYPE html><html><head><style>p{color:red}</style><script>var x=1"
                 "</script></head><body><p>Bad&nbsp;gateway &amp; more</p></body></html>",
                 "Bad gateway & more", id="style and script left out, entities decoded"),
    pytest.param("<html><head><title>Service down</title></head><body></body></html>",
                 "Service down", id="the title when the body has no text"),
    pytest.param("<html><body><h1>Oops</h1><p>cut off in the mid", "Oops cut off in the mid",
                 id="cut off"),
    pytest.param('{"error": "<b>not html</b>"}', '{"error": "<b>not html</b>"}',
                 id="json kept as it is"),
])
def test_html_answers_give_their_text(body: str, text: str) -> None:
    """Tags, hidden elements and entities of an HTML answer do not reach last_error."""
    assert classify(status(502, body), 1, 5, NOW).last_error == f"HTTP 502: {text}"


def test_a_secret_split_by_markup_is_masked_whole() -> None:
    """A signature echoed in an HTML page is masked before its tags go."""
    signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    page = f"<html><body><pre>webhook-signature: {signature[:20]}<b></b>{signature[20:]}</pre>"
    error = classify(status(401, page, **{"content-type": "text/html"}), 1, 5, NOW).last_error
    assert error is not None
    assert "g0hM9SsE" not in error
    assert "OTPJTGt" not in error
    assert "ELVlNIOLJ1OE" not in error


def test_last_error_of_a_redirect_says_it_was_not_followed() -> None:
    """A 3xx says redirects are not followed and where it pointed."""
    outcome = classify(status(302, location="https://elsewhere.example/"), 1, 5, NOW)
    assert outcome.last_error == (
        "HTTP 302: redirects are not followed (location: https://elsewhere.example/)")


def test_last_error_of_errors_before_a_status() -> None:
    """Timeouts and blocked addresses say so plainly."""
    assert classify(failure("timeout", "no answer after 10s"), 1, 5, NOW).last_error == (
        "timeout: no answer after 10s")
    blocked = classify(failure("blocked", "10.0.0.5 is in a private network"), 1, 5, NOW)
    assert blocked.last_error is not None
    assert "private-network guard" in blocked.last_error
    assert "10.0.0.5" in blocked.last_error


def test_last_error_drops_control_characters() -> None:
    """Newlines, escapes and bidi overrides from the body do not reach last_error."""
    body = "line one\r\n\x1b[31mred\x1b[0m\ttab\u202eevil\x00"
    error = classify(status(500, body), 1, 5, NOW).last_error
    assert error == "HTTP 500: line one [31mred [0m tab evil"


def test_last_error_is_capped() -> None:
    """A long error page is cut to a bounded last_error."""
    error = classify(status(500, "x" * 5000), 1, 5, NOW).last_error
    assert error is not None
    assert len(error) == MAX_ERROR_LENGTH
    assert error.endswith("…")


def test_last_error_masks_secrets_echoed_by_the_receiver() -> None:
    """A body echoing the signature, a secret or a bearer token has them masked."""
    signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    body = (f"bad signature {signature} for whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw "
            "with Authorization: Bearer abcdef123456.xyz")
    error = classify(status(401, body), 1, 5, NOW).last_error
    assert error is not None
    for secret in ("g0hM9SsE", "MfKQ9r8G", "abcdef123456"):
        assert secret not in error
    assert error.startswith("HTTP 401: bad signature [redacted]")


SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
KEY = b"the endpoint's key, 32 bytes!!!!"


def error_for(body: str) -> str:
    """last_error of a 500 whose body is ``body``."""
    error = classify(status(500, body), 1, 5, NOW).last_error
    assert error is not None
    return error


@pytest.mark.parametrize(("body", "hidden"), [
    pytest.param("Authorization: Basic dXNlcjpwYXNz\r\nAccept: */*", "dXNlcjpwYXNz",
                 id="basic in a header line"),
    pytest.param("credentials Basic dXNlcjpwYXNz refused", "dXNlcjpwYXNz", id="basic in prose"),
    pytest.param('{"authorization": "Token 9944b09199c62bcf9418ad846dd0e4bb"}', "9944b091",
                 id="token in JSON"),
    pytest.param("unknown Token abc123def456", "abc123", id="token in prose"),
    pytest.param("Authorization: Bearer t0k", "t0k", id="short bearer"),
    pytest.param("we got bearer Xy9 here", "Xy9", id="short bearer in prose"),
    pytest.param("authorization=Bearer%20abc%2Fdef%3D&x=1", "abc", id="percent-encoded bearer"),
    pytest.param("q=Bearer%20abc%2Fdef%3D&x=1", "abc", id="percent-encoded bearer unnamed"),
    pytest.param('{"Authorization":["Basic dXNlcjpwYXNz"]}', "dXNlcjpwYXNz",
                 id="go header map"),
    pytest.param('{"h":"{\\"authorization\\":\\"Bearer sesame-1\\"}"}', "sesame",
                 id="escaped JSON in JSON"),
    pytest.param("Cookie: session=s3cr3t; theme=dark", "s3cr3t", id="cookie"),
    pytest.param(f"sig {SIGNATURE} bad", "g0hM9SsE", id="signature"),
    pytest.param(f"sigs {SIGNATURE} {SIGNATURE.replace('g0h', 'h1i')}", "OTPJTGt",
                 id="two signatures"),
    pytest.param('{"sig":"' + SIGNATURE.replace("/", "\\/") + '"}', "OTPJTGt",
                 id="JSON-escaped signature"),
    pytest.param("sig=" + quote(SIGNATURE, safe="") + "&x=1", "OTPJTGt",
                 id="URL-encoded signature"),
    pytest.param("sig=" + SIGNATURE.replace("+", "\\u002b"), "OTPJTGt",
                 id="unicode-escaped signature"),
    pytest.param("webhook-signature: v1,somethingnew==", "somethingnew",
                 id="signature header of any shape"),
    pytest.param("secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8G", id="whsec"),
    pytest.param('{"s":"whsec_Mf\\/KQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}', "KQ9r8G",
                 id="JSON-escaped whsec"),
])
def test_last_error_masks_every_spelling_of_a_credential(body: str, hidden: str) -> None:
    """Basic, Token and short bearer credentials, escaped or encoded signatures: masked."""
    error = error_for(body)
    assert hidden not in error
    assert "[redacted]" in error


@pytest.mark.parametrize("cut", [4, 10, 20, 43])
def test_a_signature_cut_at_the_end_of_the_excerpt_is_masked(cut: int) -> None:
    """The excerpt may end inside a signature: the part that made it is masked too."""
    error = error_for("x" * 100 + " got " + SIGNATURE[:cut])
    assert error.endswith(" got [redacted]")


def test_a_signature_across_the_length_cap_is_masked_whole() -> None:
    """Masking comes before the cap: the cap never leaves the start of a signature."""
    body = "x" * (MAX_ERROR_LENGTH - 30) + " " + SIGNATURE + " tail"
    error = error_for(body)
    assert len(error) <= MAX_ERROR_LENGTH
    assert "g0hM" not in error


@pytest.mark.parametrize("body", [
    "missing bearer token", "Bearer token required", "Basic auth is not accepted",
    "Token expired", 'WWW-Authenticate: Bearer realm="hooks"', "API v1, v2 and v3",
])
def test_prose_about_credentials_stays_readable(body: str) -> None:
    """Words that follow 'bearer', 'basic' or 'token' in a message are not credentials."""
    assert error_for(body) == f"HTTP 500: {body}"


def delivery_with(headers: dict[str, str]) -> Delivery:
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload="{}", headers=headers,
                      created_at=NOW)
    return Delivery(id=1, endpoint_id=1, event=event, attempts=1, lease_token=uuid.uuid4())


def decided_error(body: str, endpoint_headers: dict[str, str],
                  event_headers: dict[str, str] | None = None) -> str:
    """last_error as decide() writes it, for an endpoint and event with these headers."""
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/", headers=endpoint_headers,
                        keys=(KEY,))
    decision = decide(delivery_with(event_headers or {}), endpoint, status(500, body), NOW,
                      middle)
    assert decision.record.error is not None
    return decision.record.error


API_KEY = "k3y/with+odd=chars-0042"


@pytest.mark.parametrize("body", [
    f"you sent {API_KEY} which is unknown",
    f"X-Api-Token: {API_KEY}\r\nAccept: */*",
    '{"x-api-token": "' + API_KEY.replace("/", "\\/") + '"}',
    "key=" + quote(API_KEY, safe="") + "&x=1",
    "key=" + quote_plus(API_KEY) + "&x=1",
    "the excerpt ends in the key " + API_KEY[:9],
])
def test_custom_header_values_of_the_endpoint_are_masked(body: str) -> None:
    """An endpoint's --header value echoed in any spelling, or cut at the end, is masked."""
    error = decided_error(body, {"x-api-token": API_KEY, "x-tenant": "acme"})
    assert "k3y" not in error
    assert "0042" not in error


def test_an_echoed_header_line_keeps_its_name_and_loses_its_value() -> None:
    """The echo stays readable: each header's name, then one mask for its value."""
    error = decided_error(f"x-api-token: {API_KEY}\r\nauthorization: Basic dXNlcjpwYXNz\r\n"
                          "accept: */*", {"x-api-token": API_KEY, "authorization": "Basic x"})
    assert error == ("HTTP 500: x-api-token: [redacted] authorization: [redacted] "
                     "accept: */*")


def test_event_header_values_are_masked_after_their_name_only() -> None:
    """An event header's value is masked where the echo names it, and left alone elsewhere."""
    error = decided_error("x-trace: trace-77\r\nno route for trace-77", {},
                          {"x-trace": "trace-77"})
    assert error == "HTTP 500: x-trace: [redacted] no route for trace-77"


def test_short_custom_values_are_masked_only_after_their_name() -> None:
    """A 1-3 character value is masked after its header's name, not as a word anywhere."""
    error = decided_error("x-shard: 7\r\nshard 7 is down", {"x-shard": "7"})
    assert error == "HTTP 500: x-shard: [redacted] shard 7 is down"


def test_the_endpoint_signing_key_is_masked() -> None:
    """A receiver printing the key it expected (base64, no whsec_) has it masked."""
    encoded = base64.b64encode(KEY).decode()
    error = decided_error(f"expected key {encoded}", {})
    assert encoded[:8] not in error


def payload_delivery(payload: str, n: int = 1) -> Delivery:
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload=payload, headers={},
                      created_at=NOW)
    return Delivery(id=n, endpoint_id=1, event=event, attempts=1, lease_token=uuid.uuid4())


@pytest.mark.parametrize("spelling", ["plain", "json", "cut"])
def test_echoed_payloads_of_the_whole_request_are_masked(spelling: str) -> None:
    """The request's payloads (a batch's too) echoed as sent, JSON-escaped or cut: masked."""
    mine, other = '{"card":"4111-1111/1111"}', '{"email":"ann@example.org"}'
    echoed = f"[{mine},{other}]"
    body = {"plain": echoed, "json": json.dumps({"body": echoed}).replace("/", "\\/"),
            "cut": echoed[:len(mine) + 12]}[spelling]
    batch = [payload_delivery(mine, 1), payload_delivery(other, 2)]
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/")
    error = decide(batch[0], endpoint, status(500, body), NOW, middle, batch=batch).record.error
    assert error is not None
    for secret in ("4111", "ann@", "example.org"):
        assert secret not in error, error
    assert REDACTED in error


def test_a_megabyte_payload_is_masked_by_its_start() -> None:
    """A 1 MiB payload echoed from its start, cut by the excerpt, is masked whole."""
    payload = json.dumps({"blob": "x" * (1024 * 1024)})
    error = decide(payload_delivery(payload), Endpoint(id=1, name="e", url="http://h/"),
                   status(500, "got " + payload[:4000]), NOW, middle).record.error
    assert error == f"HTTP 500: got {REDACTED}"


CARD, NAME, NOTE = "4111111111111111", "Alice Example", 'a/b "q" é&c'
PAYLOAD = json.dumps({"card": CARD, "name": NAME, "amount": 1234.50, "note": NOTE},
                     separators=(",", ":"), ensure_ascii=False)  # as stored: compact


def reserialised(spelling: str) -> str:
    """The payload parsed by a receiver and written again, inside what it answers."""
    data = json.loads(PAYLOAD)
    body = {"id": "evt", "type": "t", "data": data}
    return {
        "json.dumps": json.dumps({"request_line": "POST / HTTP/1.1", "body": body}),
        "pretty": json.dumps(body, indent=4, ensure_ascii=False),
        "repr": repr(body),
        "form": urlencode({k: str(v) for k, v in data.items()}),
        "quoted-json": json.dumps({"raw": json.dumps(body)}),
        "html": f"<pre>{html.escape(repr(body))}</pre>",
    }[spelling]


@pytest.mark.parametrize("spelling", ["json.dumps", "pretty", "repr", "form", "quoted-json",
                                      "html"])
def test_payload_values_written_again_by_the_receiver_are_masked(spelling: str) -> None:
    """Every string and number value of 4+ characters is masked, in any spacing or quoting;
    the keys stay, so the error still shows what the receiver did."""
    error = decide(payload_delivery(PAYLOAD), ENDPOINT, status(500, reserialised(spelling)),
                   NOW, middle).record.error
    assert error is not None
    for value in (CARD, NAME, "Alice", "1234.5", "a/b", "é&c", "q\\"):
        assert value not in error, (value, error)
    assert "card" in error
    assert REDACTED in error


def test_payload_values_cut_at_the_end_of_the_excerpt_are_masked() -> None:
    """The start of a value that the excerpt cut off is masked too."""
    echo = json.dumps(json.loads(PAYLOAD), indent=2)
    echo = echo[:echo.index(CARD) + 6]
    error = decide(payload_delivery(PAYLOAD), ENDPOINT, status(500, echo), NOW,
                   middle).record.error
    assert error is not None
    assert CARD[:6] not in error


def test_short_payload_values_and_ordinary_words_stay_readable() -> None:
    """Values under 4 characters are not masked, nor anything the payload does not hold."""
    payload = '{"n":7,"ok":true,"c":"abc"}'
    error = decide(payload_delivery(payload), ENDPOINT,
                   status(500, "invalid field n: 7 (abc) in request"), NOW, middle).record.error
    assert error == "HTTP 500: invalid field n: 7 (abc) in request"


def test_query_values_of_the_endpoint_url_are_masked_in_an_echoed_request_line() -> None:
    """?token=... echoed back (a request line, a logged URL) is masked, short values too."""
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/in?token=q-77-secret&v=1")
    body = json.dumps({"request_line": "POST /in?token=q-77-secret&v=1 HTTP/1.1",
                       "note": "token q-77-secret"})
    error = decide(payload_delivery("{}"), endpoint, status(500, body), NOW, middle).record.error
    assert error is not None
    assert "q-77-secret" not in error
    assert "v=1" not in error
    assert "POST /in?token=[redacted]&v=[redacted] HTTP/1.1" in error


def test_retry_after_in_seconds() -> None:
    """A 429 with Retry-After in seconds carries that delay."""
    outcome = classify(status(429, **{"retry-after": "30"}), 1, 5, NOW)
    assert outcome.retry_after == 30.0
    assert next_attempt_delay(1, ENDPOINT, outcome.retry_after, middle) == 30.0


def test_retry_after_as_http_date() -> None:
    """A 503 with an HTTP-date Retry-After waits until that date."""
    when = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert classify(status(503, **{"retry-after": when}), 1, 5, NOW).retry_after == 90.0


def test_invalid_retry_after_falls_back_to_the_schedule() -> None:
    """An unreadable Retry-After is ignored and the exponential schedule applies."""
    outcome = classify(status(503, **{"retry-after": "later please"}), 2, 5, NOW)
    assert outcome.retry_after is None
    assert next_attempt_delay(2, ENDPOINT, outcome.retry_after, middle) == 2.0


def test_retry_after_over_an_hour_is_clamped() -> None:
    """A Retry-After of two hours waits one hour."""
    outcome = classify(status(503, **{"retry-after": "7200"}), 1, 5, NOW)
    assert next_attempt_delay(1, ENDPOINT, outcome.retry_after, middle) == 3600.0


def test_retry_after_past_max_backoff_is_honoured() -> None:
    """A Retry-After beyond the endpoint's max_backoff is obeyed."""
    outcome = classify(status(429, **{"retry-after": "600"}), 1, 5, NOW)
    assert next_attempt_delay(1, ENDPOINT, outcome.retry_after, middle) == 600.0


def test_retry_after_is_ignored_when_the_delivery_is_dead() -> None:
    """A permanent failure or the last attempt has no retry delay."""
    assert classify(status(400, **{"retry-after": "5"}), 1, 5, NOW).retry_after is None
    assert classify(status(503, **{"retry-after": "5"}), 5, 5, NOW).retry_after is None
