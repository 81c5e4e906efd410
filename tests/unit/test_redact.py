"""Masking what a receiver echoes: payload values wherever they stand, URL path tokens, cost.

A validation error quotes the one field it refused, from anywhere in the
payload; these tests place it far from the payload's start, where the
answer's own length once bounded the search, and check the bounds that
keep a megabyte payload cheap.
"""

from __future__ import annotations

import json
import random
import string
import time
import uuid
from datetime import UTC, datetime

import pytest

from dispatcher.policy import payload_values
from dispatcher.policy.model import Delivery, Endpoint, EventData
from dispatcher.policy.outcome import clean_error
from dispatcher.policy.redact import REDACTED, Sent, redact

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
ENDPOINT = Endpoint(id=1, name="e", url="http://127.0.0.1:9/")
SSN = "078-05-1120"


def delivery(payload: str, n: int = 1) -> Delivery:
    event = EventData(id=uuid.uuid4(), type="t", key=None, payload=payload, headers={},
                      created_at=NOW)
    return Delivery(id=n, endpoint_id=1, event=event, attempts=1, lease_token=uuid.uuid4())


def payload_with_ssn_at(offset: int) -> str:
    """Compact JSON whose "ssn" value starts ``offset`` characters into it."""
    prefix = '{"filler":"'
    suffix = '","ssn":"'
    payload = prefix + "f" * (offset - len(prefix) - len(suffix)) + suffix + SSN + '"}'
    assert payload.index(SSN) == offset
    return payload


def fastapi_422(value: str) -> str:
    """FastAPI's answer to a field it refused: short, and quoting the field's value."""
    return json.dumps({"detail": [{"loc": ["body", "ssn"], "msg": "invalid",
                                   "input": value}]}, separators=(",", ":"))


@pytest.mark.parametrize("offset", [240, 1_040, 3_040, 60_000])
def test_a_quoted_field_is_masked_wherever_it_sits_in_the_payload(offset: int) -> None:
    """An 84-byte 422 quoting a value from far into the payload shows it as [redacted]."""
    answer = fastapi_422(SSN)
    assert len(answer) < 100 < offset
    error = redact(answer, Sent.of(ENDPOINT, delivery(payload_with_ssn_at(offset))))
    assert SSN not in error
    assert error == fastapi_422(REDACTED)


def test_values_past_the_first_64_kib_of_a_payload_are_not_looked_for() -> None:
    """The documented bound: a value past ROOM_EACH stays (keeps the cost bounded)."""
    payload = payload_with_ssn_at(payload_values.ROOM_EACH + 10)
    assert redact(fastapi_422(SSN), Sent.of(ENDPOINT, delivery(payload))) == fastapi_422(SSN)


def test_a_value_of_a_batch_is_masked_in_every_delivery_of_the_request() -> None:
    """A field of the batch's third event, quoted: masked in each delivery's last_error."""
    batch = [delivery(json.dumps({"n": i, "ssn": f"078-05-{1000 + i}"}), i) for i in range(3)]
    answer = fastapi_422("078-05-1002")
    for each in batch:
        sent = Sent.of(ENDPOINT, each, batch)
        assert sent == Sent.of(ENDPOINT, batch[0], batch)  # one masking per request
        assert "078-05-1002" not in redact(answer, sent)


def test_a_batch_is_looked_for_up_to_its_room() -> None:
    """Payloads are taken in the request's order until ROOM of them is looked for."""
    big = '{"blob":"' + "x" * payload_values.ROOM_EACH + '"}'
    batch = [delivery(big if i < 6 else f'{{"n":{i}}}', i) for i in range(9)]
    assert payload_values.ROOM == 4 * payload_values.ROOM_EACH
    sent = Sent.of(ENDPOINT, batch[0], batch)
    assert len(sent.payloads) == 4  # 64 KiB of each, then the room is spent
    assert Sent.of(ENDPOINT, batch[7], batch) == sent


@pytest.mark.parametrize("value", ["'quoted\" both", "<b>&amp;é", "trailing / slash",
                                   "\ttabbed"])
def test_values_whose_start_changes_with_the_spelling_are_masked(value: str) -> None:
    """Values starting with a quote, an escape or a space: found in every spelling."""
    payload = json.dumps({"pad": "p" * 500, "v": value})
    sent = Sent.of(ENDPOINT, delivery(payload))
    for spelling in (repr({"v": value}), json.dumps({"input": value}),
                     json.dumps(json.dumps({"v": value}))):
        assert value not in redact(spelling, sent)
        assert REDACTED in redact(spelling, sent), spelling


def test_overlapping_values_leave_nothing_of_either() -> None:
    """Two values that overlap in the answer are both masked whole, as one mask."""
    payload = json.dumps({"a": "alpha-bravo", "b": "bravo-charlie"})
    error = redact("got alpha-bravo-charlie.", Sent.of(ENDPOINT, delivery(payload)))
    assert error == f"got {REDACTED}."


def test_a_token_in_the_url_path_is_masked_in_an_echo() -> None:
    """A Slack-style hook's token, echoed in a request line or a JSON body: masked."""
    token = "aB3dE6gH9jK2mN5pQ8sT1vW4"
    endpoint = Endpoint(id=1, name="slack", url=f"https://hooks.example.com/services/"
                        f"T0001/B0001/{token}?x=1")
    for answer in (f"no route for POST /services/T0001/B0001/{token} HTTP/1.1",
                   json.dumps({"path": f"/services/T0001/B0001/{token}"}).replace("/", "\\/"),
                   f"cut at /services/T0001/B0001/{token[:10]}"):
        error = redact(answer, Sent.of(endpoint, delivery("{}")))
        assert token[:8] not in error, error
        assert "/services/T0001/B0001/" + REDACTED in error.replace("\\/", "/")


def test_a_megabyte_payload_of_many_values_stays_cheap() -> None:
    """1 MiB of payload with thousands of values against a full excerpt: milliseconds."""
    rng = random.Random(7)

    def word(n: int) -> str:
        return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))

    items = [{"id": rng.randrange(10**9), "name": word(12), "note": word(40),
              "phone": f"(555) {rng.randrange(1000):03d}-{rng.randrange(10000):04d}"}
             for _ in range(11_000)]
    payload = json.dumps({"items": items}, separators=(",", ":"))
    assert len(payload) > 1024 * 1024
    quoted = items[300]["name"]
    noise = " ".join(word(rng.randrange(3, 10)) for _ in range(700))
    answer = "HTTP 422: " + (fastapi_422(quoted) + " (555) " + noise)[:4096]
    sent = Sent.of(ENDPOINT, delivery(payload))
    started = time.perf_counter()
    error = clean_error(answer, sent)
    took = time.perf_counter() - started
    assert quoted not in error
    assert took < 0.5, f"{took:.3f} s"  # about 5 ms on a laptop; generous for a busy CI
