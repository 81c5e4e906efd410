"""What the application's functions refuse: env: secrets unless allowed, and every bad
argument, with the error the rules name, a message naming the argument in the functions'
own terms (never a command-line flag), and nothing changed (real PostgreSQL)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import outbox
from outbox import endpoints
from outbox.errors import EventsNotFound
from tests.integration.test_endpoints_tenant_guard import everything

Conn = psycopg.Connection[Any]
SECRET = "whsec_" + "QUJD" * 8
FLAG = re.compile(r"(?<![\w-])--[a-z]")


@pytest.fixture
def hook(conn: Conn) -> uuid.UUID:
    """acme's endpoint with an undelivered delivery; committed. The event's id."""
    endpoints.add(conn, "hook", url="https://hooks.acme.example/", tenant="acme")
    event_id = outbox.publish(conn, "order.placed", {}, tenant="acme")
    conn.commit()
    return event_id


ENV_REFUSED: list[Callable[[Conn], Any]] = [
    lambda c: endpoints.add(c, "two", url="https://x.example/", secret="env:OUTBOX_SECRET_X"),
    lambda c: endpoints.update(c, "hook", secret="env:OUTBOX_SECRET_X"),
    lambda c: endpoints.rotate_secret(c, "hook", secret="env:OUTBOX_SECRET_X"),
    lambda c: endpoints.add(c, "two", url="https://x.example/", secret="env:OUTBOX_DSN",
                            allow_env_secret=True),
]


@pytest.mark.parametrize("call", ENV_REFUSED)
def test_an_env_secret_is_refused_from_the_application(conn: Conn, hook: uuid.UUID,
                                                       call: Callable[[Conn], Any]) -> None:
    """add, update and rotate_secret refuse env:NAME (the dispatcher's environment is the
    operator's) unless allow_env_secret=True, and then only a name the rules allow."""
    before = everything(conn)
    with pytest.raises(endpoints.InvalidEndpoint, match=r"^secret ") as raised:
        call(conn)
    assert "whsec_" in str(raised.value) or "is not allowed" in str(raised.value)
    assert not FLAG.search(str(raised.value))
    conn.commit()
    assert everything(conn) == before


def test_allow_env_secret_lets_the_operators_code_name_one(conn: Conn, hook: uuid.UUID) -> None:
    """With allow_env_secret=True, add, update and rotate_secret store env:NAME as given."""
    endpoints.add(conn, "two", url="https://x.example/", secret="env:OUTBOX_SECRET_TWO",
                  allow_env_secret=True)
    assert endpoints.get(conn, "two")["signing"] == "env:OUTBOX_SECRET_TWO"
    endpoints.update(conn, "hook", secret="env:OUTBOX_SECRET_A", allow_env_secret=True)
    assert endpoints.rotate_secret(conn, "hook", secret="env:OUTBOX_SECRET_B",
                                   allow_env_secret=True) == "env:OUTBOX_SECRET_B"
    assert endpoints.get(conn, "hook")["signing"] == "env:OUTBOX_SECRET_B"


def test_messages_speak_of_the_functions_arguments(conn: Conn, hook: uuid.UUID) -> None:
    """EndpointBusy names force=True, EndpointExists no command, a URL with credentials a
    header: no message of the functions names a command-line flag."""
    with pytest.raises(endpoints.EndpointBusy, match=r"force=True") as busy:
        endpoints.remove(conn, "hook")
    with pytest.raises(endpoints.EndpointExists) as exists:
        endpoints.add(conn, "hook", url="https://x.example/")
    with pytest.raises(endpoints.InvalidEndpoint, match="header") as credentials:
        endpoints.add(conn, "two", url="https://user:pw@x.example/")
    for raised in (busy, exists, credentials):
        assert not FLAG.search(str(raised.value)), raised.value
        assert "outbox endpoints" not in str(raised.value)


BAD: list[tuple[str, Callable[[Conn, uuid.UUID], Any], type[Exception]]] = [
    ("name", lambda c, e: endpoints.get(c, 42), endpoints.InvalidEndpoint),  # type: ignore[arg-type]
    ("name", lambda c, e: endpoints.remove(c, "bad name!"), endpoints.InvalidEndpoint),
    ("as_tenant", lambda c, e: endpoints.get(c, "hook", as_tenant=""), endpoints.InvalidEndpoint),
    ("as_tenant", lambda c, e: endpoints.list(c, as_tenant="a\nb"), endpoints.InvalidEndpoint),
    ("as_tenant", lambda c, e: endpoints.deliveries(c, as_tenant=7), endpoints.InvalidEndpoint),
    ("force", lambda c, e: endpoints.remove(c, "hook", force="yes"), endpoints.InvalidEndpoint),
    ("check_url", lambda c, e: endpoints.add(c, "x", url="https://x.example/", check_url=1),
     endpoints.InvalidEndpoint),
    ("allow_env_secret", lambda c, e: endpoints.update(c, "hook", allow_env_secret="no"),
     endpoints.InvalidEndpoint),
    ("url", lambda c, e: endpoints.add(c, "x", url="http://10.0.0.1/", check_url=True),
     endpoints.InvalidEndpoint),
    ("url", lambda c, e: endpoints.update(c, "hook", url="http://[::1]/", check_url=True),
     endpoints.InvalidEndpoint),
    ("headers", lambda c, e: endpoints.update(c, "hook", headers={"Bad Name": "x"}),
     endpoints.InvalidEndpoint),
    ("headers", lambda c, e: endpoints.update(c, "hook", headers={"X": "a\r\nb"}),
     endpoints.InvalidEndpoint),
    ("events", lambda c, e: endpoints.add(c, "x", url="https://x.example/", events=["a..b"]),
     endpoints.InvalidEndpoint),
    ("description", lambda c, e: endpoints.update(c, "hook", description="x" * 201),
     endpoints.InvalidEndpoint),
    ("overlap", lambda c, e: endpoints.rotate_secret(c, "hook", overlap=-1),
     endpoints.InvalidEndpoint),
    ("tenant", lambda c, e: endpoints.retry_now(c, "hook", tenant=""),
     endpoints.InvalidEndpoint),
    ("limit", lambda c, e: endpoints.deliveries(c, limit=0), endpoints.InvalidEndpoint),
    ("limit", lambda c, e: endpoints.deliveries(c, limit=True), endpoints.InvalidEndpoint),
    ("limit", lambda c, e: endpoints.deliveries(c, limit=1001), endpoints.InvalidEndpoint),
    ("state", lambda c, e: endpoints.deliveries(c, state="lost"), endpoints.InvalidEndpoint),
    ("before", lambda c, e: endpoints.deliveries(c, before="42"), endpoints.InvalidEndpoint),
    ("since", lambda c, e: endpoints.deliveries(c, since="yesterday"),
     endpoints.InvalidEndpoint),
    ("event_id", lambda c, e: endpoints.deliveries(c, event_id="x"), endpoints.InvalidEndpoint),
    ("event_id", lambda c, e: endpoints.attempts(c, "not-a-uuid"), endpoints.InvalidEndpoint),
    ("since", lambda c, e: endpoints.replay(c, "hook"), endpoints.InvalidEndpoint),
    ("since", lambda c, e: endpoints.replay(c, "hook", since=timedelta(hours=1),
                                            event_ids=[e]), endpoints.InvalidEndpoint),
    ("until", lambda c, e: endpoints.replay(c, "hook", event_ids=[e], until=timedelta(0)),
     endpoints.InvalidEndpoint),
    ("event_ids", lambda c, e: endpoints.replay(c, "hook", event_ids=[]),
     endpoints.InvalidEndpoint),
    ("event_ids", lambda c, e: endpoints.replay(c, "hook", event_ids=str(e)),
     endpoints.InvalidEndpoint),
    ("event_ids", lambda c, e: endpoints.retry_dead(c, "hook", event_ids=["nope"]),
     endpoints.InvalidEndpoint),
    ("types", lambda c, e: endpoints.replay(c, "hook", event_ids=[e], types=["a..b"]),
     endpoints.InvalidEndpoint),
    ("dry_run", lambda c, e: endpoints.replay(c, "hook", event_ids=[e], dry_run="no"),
     endpoints.InvalidEndpoint),
    ("type", lambda c, e: endpoints.send_test(c, "hook", type="not a type"),
     endpoints.InvalidEndpoint),
    ("data", lambda c, e: endpoints.send_test(c, "hook", data={"x": object()}),
     endpoints.InvalidEndpoint),
    ("data", lambda c, e: endpoints.send_test(c, "hook", data="x" * (2 << 20)),
     endpoints.InvalidEndpoint),
    ("nope", lambda c, e: endpoints.replay(c, "nope", event_ids=[e]),
     endpoints.EndpointNotFound),
    ("00000000", lambda c, e: endpoints.replay(c, "hook", event_ids=[uuid.UUID(int=1)]),
     EventsNotFound),
]


@pytest.mark.parametrize(("argument", "call", "error"), BAD,
                         ids=[f"{i}-{argument}" for i, (argument, _, _) in enumerate(BAD)])
def test_a_bad_argument_is_refused_by_name_and_changes_nothing(
        conn: Conn, hook: uuid.UUID, argument: str, call: Callable[[Conn, uuid.UUID], Any],
        error: type[Exception]) -> None:
    """Each function refuses a bad argument with the error the rules name, its message
    naming the argument and no command-line flag; the transaction goes on and nothing
    changed."""
    before = everything(conn)
    conn.commit()
    with pytest.raises(error) as raised:
        call(conn, hook)
    message = str(raised.value)
    assert argument in message, message
    assert not FLAG.search(message), message
    assert isinstance(raised.value, outbox.OutboxError)
    conn.commit()
    assert everything(conn) == before


@pytest.mark.parametrize(("argument", "call", "error"),
                         [case for case in BAD if case[2] is endpoints.InvalidEndpoint],
                         ids=[f"{i}-{case[0]}" for i, case in enumerate(BAD)
                              if case[2] is endpoints.InvalidEndpoint])
def test_a_bad_argument_is_refused_before_any_sql(
        dsn: str, argument: str, call: Callable[[Conn, uuid.UUID], Any],
        error: type[Exception]) -> None:
    """The arguments are checked before any statement: on a closed connection a bad one is
    still the InvalidEndpoint naming it, not a connection error. (Only what needs the
    stored endpoint waits for it: the URL check_url=True judges when none is given, and
    rules between two options, such as min_backoff above max_backoff.)"""
    closed = psycopg.connect(dsn)
    closed.close()
    with pytest.raises(endpoints.InvalidEndpoint, match=argument):
        call(closed, uuid.uuid4())
