"""A tenant's endpoint never receives another tenant's event: generated tenants, endpoints
and events, published with publish() and sent by the real dispatcher to a real receiver.

Each example defines endpoints (some of a tenant, some of none, each with its
patterns), publishes events (some of a tenant, some of none), and may write
stray deliveries by hand (as a publisher of an earlier release, which routes
by type alone, would), then runs ``python -m dispatcher --once``. What each
endpoint received is then exactly what the rule gives it (its patterns match,
and it has no tenant or the event's); a stray delivery to another tenant's
endpoint is a dead letter that says why, and was never sent.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import outbox
from outbox.endpoints import EndpointSpec, add_endpoint
from outbox.testing import Receiver
from tests.support.dispatcher import Dispatcher, run_once

Conn = psycopg.Connection[Any]

_TENANTS = ("acme", "globex", "a b~", "x" * 200)
_PATTERNS = ("*", "order.*", "mail.*")
_TYPES = ("order.placed", "mail.sent", "user.joined")
_RUNS = itertools.count()


@dataclass(frozen=True)
class Case:
    endpoints: list[tuple[str | None, str]]  # (tenant, pattern) each
    events: list[tuple[str, str | None]]  # (type, tenant) each
    strays: list[tuple[int, int]]  # (event index, endpoint index): a delivery by hand


@st.composite
def cases(draw: st.DrawFn) -> Case:
    tenant = st.one_of(st.none(), st.sampled_from(_TENANTS))
    endpoints = draw(st.lists(st.tuples(tenant, st.sampled_from(_PATTERNS)),
                              min_size=1, max_size=4))
    events = draw(st.lists(st.tuples(st.sampled_from(_TYPES), tenant), min_size=1,
                           max_size=8))
    strays = draw(st.lists(st.tuples(st.integers(0, len(events) - 1),
                                     st.integers(0, len(endpoints) - 1)),
                           max_size=3, unique=True))
    return Case(endpoints, events, strays)


def _matches(pattern: str, event_type: str) -> bool:
    return pattern == "*" or event_type.startswith(pattern[:-1])


def _reset(conn: Conn) -> None:
    conn.execute("TRUNCATE outbox.endpoints, outbox.events, outbox.deliveries CASCADE")
    conn.commit()


def _setup(conn: Conn, case: Case, url: str) -> tuple[list[str], list[uuid.UUID]]:
    """The endpoints and events of ``case`` (names, ids), committed; strays written too."""
    names = [f"ep{n}" for n in range(len(case.endpoints))]
    for name, (tenant, pattern) in zip(names, case.endpoints, strict=True):
        add_endpoint(conn, EndpointSpec(name=name, url=f"{url}/{name}", events=(pattern,),
                                        tenant=tenant))
    conn.commit()
    ids = [outbox.publish(conn, event_type, {"n": n}, tenant=tenant)
           for n, (event_type, tenant) in enumerate(case.events)]
    for event_index, endpoint_index in case.strays:
        conn.execute(
            "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq, key, tenant) "
            "SELECT ev.id, ep.id, ev.seq, ev.key, ev.tenant FROM outbox.events ev, "
            "outbox.endpoints ep WHERE ev.id = %s AND ep.name = %s AND ep.removed_at IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM outbox.deliveries d "
            "                WHERE d.event_id = ev.id AND d.endpoint_id = ep.id)",
            (ids[event_index], names[endpoint_index]))
    conn.commit()
    return names, ids


def _received(receiver: Receiver, prefix: int) -> dict[str, list[dict[str, Any]]]:
    """Per endpoint name, the events its requests carried (this run's requests only)."""
    got: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for request in receiver.snapshot():
        parts = request.path.strip("/").split("/")
        if parts[0] == f"run{prefix}":
            got[parts[1]].append(json.loads(request.body))
    return got


def _check(conn: Conn, case: Case, names: list[str], ids: list[uuid.UUID],
           got: dict[str, list[dict[str, Any]]]) -> None:
    tenant_of = {str(event_id): tenant for event_id, (_, tenant) in zip(ids, case.events,
                                                                        strict=True)}
    for name, (tenant, pattern) in zip(names, case.endpoints, strict=True):
        received = got.get(name, [])
        if tenant is not None:  # the promise itself, whatever made the delivery
            assert all(tenant_of[e["id"]] == tenant and e.get("tenant") == tenant
                       for e in received), (name, tenant, received)
        routed = {str(event_id) for event_id, (event_type, event_tenant)
                  in zip(ids, case.events, strict=True)
                  if _matches(pattern, event_type)
                  and (tenant is None or event_tenant == tenant)}
        stray = {str(ids[e]) for e, ep in case.strays if names[ep] == name
                 and (tenant is None or case.events[e][1] == tenant)}
        assert {e["id"] for e in received} == routed | stray, name
    rows = conn.execute(
        "SELECT ep.name, ev.id::text, d.state, d.last_error FROM outbox.deliveries d "
        "JOIN outbox.endpoints ep ON ep.id = d.endpoint_id "
        "JOIN outbox.events ev ON ev.id = d.event_id").fetchall()
    conn.commit()
    endpoint_tenant = dict(zip(names, (t for t, _ in case.endpoints), strict=True))
    for name, event_id, state, error in rows:
        foreign = (endpoint_tenant[name] is not None
                   and tenant_of[event_id] != endpoint_tenant[name])
        if foreign:
            assert state == "dead", (name, event_id, state)
            assert f"endpoint {name} belongs to tenant {endpoint_tenant[name]!r}" in error
        else:
            assert state == "delivered", (name, event_id, state, error)
    unrouted = dict(conn.execute("SELECT id::text, unrouted FROM outbox.events").fetchall())
    conn.commit()
    for event_id, (event_type, event_tenant) in zip(ids, case.events, strict=True):
        routes = any(_matches(pattern, event_type) and (tenant is None or tenant == event_tenant)
                     for tenant, pattern in case.endpoints)
        assert unrouted[str(event_id)] is (not routes)


# Each example starts a dispatcher process: a few seconds each.
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
def test_a_tenants_endpoint_receives_only_that_tenants_events(
        conn: Conn, dsn: str, receiver: Receiver, case: Case) -> None:
    """Every endpoint gets exactly the events its patterns match that are of its tenant (or
    any, without one); a delivery made by hand to another tenant's endpoint is dead and
    says why."""
    _reset(conn)
    run = next(_RUNS)
    names, ids = _setup(conn, case, f"{receiver.url}/run{run}")
    code, log = run_once(dsn)
    assert code in (0, 1), log
    _check(conn, case, names, ids, _received(receiver, run))


def test_several_dispatchers_keep_tenants_apart(conn: Conn, dsn: str,
                                                receiver: Receiver) -> None:
    """Three dispatchers at once over many tenants' events and strays: still no event at
    another tenant's endpoint, and each endpoint gets its own."""
    case = Case(
        endpoints=[("acme", "*"), ("globex", "order.*"), (None, "*"), ("acme", "mail.*")],
        events=[(t, tenant) for t, tenant in itertools.product(
            _TYPES * 6, ("acme", "globex", None, "initech"))],
        strays=[(n, n % 4) for n in range(0, 72, 5)])
    names, ids = _setup(conn, case, f"{receiver.url}/run-many")
    with contextlib.ExitStack() as stack:
        dispatchers = [stack.enter_context(Dispatcher(dsn, once=True)) for _ in range(3)]
        for dispatcher in dispatchers:
            assert dispatcher.wait(120) in (0, 1), dispatcher.log()
    got: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for request in receiver.snapshot():
        got[request.path.strip("/").split("/")[1]].append(json.loads(request.body))
    # At least once: a delivery may be sent twice, never to the wrong tenant.
    deduplicated: dict[str, list[dict[str, Any]]] = {
        name: list({e["id"]: e for e in events}.values()) for name, events in got.items()}
    _check(conn, case, names, ids, deduplicated)
