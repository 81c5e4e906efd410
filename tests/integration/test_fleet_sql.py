"""The fleet's limits in the claim and complete statements, and its membership, run by hand as
dispatchers would.

Slots, rate-limit turns, the circuit breaker and who is a member live in
PostgreSQL, so each promise is checked here on the statements themselves,
with several connections standing for several dispatchers and time moved by
back-dating rows (or beats), never by sleeping.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

import outbox
from dispatcher.db import APPLICATION_NAME
from dispatcher.many.membership import SKEW
from dispatcher.policy.model import ClaimRow, Record
from outbox.sql import queries
from tests.conftest import Cluster
from tests.support.claiming import (
    ENDPOINT,
    PAYLOAD,
    PROBE,
    SEND_IN,
    SIZE,
    SLOT,
    claim,
    complete,
    finish,
)
from tests.support.dispatcher import add_endpoint
from tests.support.roles import login_role, role_dsn

Conn = psycopg.Connection[Any]


def _endpoint(conn: Conn, **columns: Any) -> int:
    names = ", ".join(["name", "url", *columns])
    marks = ", ".join(["%s"] * (2 + len(columns)))
    row = conn.execute(f"INSERT INTO outbox.endpoints ({names}) VALUES ({marks}) RETURNING id",
                       ["e", "http://127.0.0.1:9/", *columns.values()]).fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def _publish(conn: Conn, count: int, **options: Any) -> None:
    outbox.publish_many(conn, [outbox.Event("t", {"n": i}, **options) for i in range(count)])
    conn.commit()


def _state(conn: Conn, endpoint_id: int) -> tuple[Any, ...]:
    """The circuit, and the attempts and failures its window holds."""
    row = conn.execute("SELECT circuit, outbox.circuit_sum_v2(window_attempts), "
                       "outbox.circuit_sum_v2(window_failures) FROM outbox.endpoint_state "
                       "WHERE endpoint_id = %s", (endpoint_id,)).fetchone()
    conn.commit()
    assert row is not None
    return tuple(row)


def test_slots_follow_max_in_flight(conn: Conn) -> None:
    """An endpoint has one slot row per --max-in-flight, kept in step when the option changes."""
    endpoint_id = _endpoint(conn, max_in_flight=3)

    def slots() -> list[int]:
        rows = conn.execute("SELECT slot FROM outbox.endpoint_slots WHERE endpoint_id = %s "
                            "ORDER BY slot", (endpoint_id,)).fetchall()
        conn.commit()
        return [r[0] for r in rows]

    assert slots() == [0, 1, 2]
    conn.execute("UPDATE outbox.endpoints SET max_in_flight = 5")
    conn.commit()
    assert slots() == [0, 1, 2, 3, 4]
    conn.execute("UPDATE outbox.endpoints SET max_in_flight = 2")
    conn.commit()
    assert slots() == [0, 1]


def test_two_claimers_never_hold_more_slots_than_max_in_flight(conn: Conn, dsn: str) -> None:
    """Claims of several dispatchers together start at most --max-in-flight requests."""
    endpoint_id = _endpoint(conn, max_in_flight=3)
    _publish(conn, 20)
    with psycopg.connect(dsn) as other:
        first = claim(conn, [endpoint_id], rows=10)
        second = claim(other, [endpoint_id], rows=10)
    slotted = [r for r in first + second if r[SLOT] is not None]
    assert len(slotted) == 3
    assert len({r[SLOT] for r in slotted}) == 3


def test_claims_racing_in_threads_share_the_slots(conn: Conn, dsn: str) -> None:
    """Eight claims at once (eight connections) grant each slot once."""
    endpoint_id = _endpoint(conn, max_in_flight=4)
    _publish(conn, 100)
    got: list[tuple[Any, ...]] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def claimer() -> None:
        with psycopg.connect(dsn) as mine:
            start.wait()
            rows = claim(mine, [endpoint_id], rows=10)
            with lock:
                got.extend(rows)

    threads = [threading.Thread(target=claimer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    slots = [r[SLOT] for r in got if r[SLOT] is not None]
    assert sorted(slots) == [0, 1, 2, 3]


def test_a_freed_slot_is_granted_again_and_an_expired_one_too(conn: Conn) -> None:
    """A slot comes back when its request ends, or by itself when its lease runs out."""
    endpoint_id = _endpoint(conn, max_in_flight=1)
    _publish(conn, 3)
    first = claim(conn, [endpoint_id], rows=1)
    assert [r[SLOT] for r in first] == [0]
    assert claim(conn, [endpoint_id], rows=1) == []
    finish(conn, first[0])
    second = claim(conn, [endpoint_id], rows=1)
    assert [r[SLOT] for r in second] == [0]
    conn.execute("UPDATE outbox.endpoint_slots SET expires_at = now() - interval '1 second'")
    conn.commit()  # the dispatcher holding it died: its lease ran out
    assert [r[SLOT] for r in claim(conn, [endpoint_id], rows=1)] == [0]


def test_prefetched_groups_hold_no_slot(conn: Conn) -> None:
    """Rows claimed to wait in memory come without a slot; only running requests hold one."""
    endpoint_id = _endpoint(conn, max_in_flight=2)
    _publish(conn, 10)
    rows = claim(conn, [endpoint_id], rows=10, requests=2, prefetch=2)
    assert len(rows) == 4
    assert sorted(r[SLOT] for r in rows if r[SLOT] is not None) == [0, 1]
    assert sum(r[SLOT] is None for r in rows) == 2
    leased = conn.execute("SELECT count(*) FROM outbox.endpoint_slots "
                          "WHERE expires_at > now()").fetchone()
    conn.commit()
    assert leased == (2,)


def test_a_claim_brings_its_byte_budget_taking_the_endpoints_in_turns(conn: Conn) -> None:
    """A claim keeps rows while the payload bytes before them are under its budget, one
    endpoint's row then the next's; the rows left out stay pending and take no slot."""
    first = add_endpoint(conn, "first", "http://127.0.0.1:9/")
    second = add_endpoint(conn, "second", "http://127.0.0.1:9/")
    outbox.publish_many(conn, [outbox.Event("t", {"n": n, "blob": "é" * 50_000})
                               for n in range(5)])
    conn.commit()
    rows = claim(conn, [first, second], rows=5, budget=450_000)
    assert [r[ENDPOINT] for r in rows].count(first) == 3
    assert [r[ENDPOINT] for r in rows].count(second) == 2
    assert all(r[SIZE] == len(r[PAYLOAD].encode()) > 100_000 for r in rows)
    leased = conn.execute("SELECT count(*) FROM outbox.endpoint_slots "
                          "WHERE expires_at > now()").fetchone()
    pending = conn.execute("SELECT count(*) FROM outbox.deliveries "
                           "WHERE state = 'pending'").fetchone()
    conn.commit()
    assert leased == (5,)
    assert pending == (5,)


def test_a_claim_brings_one_event_larger_than_its_budget(conn: Conn) -> None:
    """However small the budget, a claim takes the first row: nothing is stuck for its size."""
    endpoint_id = _endpoint(conn)
    outbox.publish_many(conn, [outbox.Event("t", {"blob": "x" * 1000}) for _ in range(3)])
    conn.commit()
    assert len(claim(conn, [endpoint_id], rows=3, budget=1)) == 1


def test_rate_limit_turns_are_spaced_and_shared(conn: Conn, dsn: str) -> None:
    """Turns go 1.05/rate apart from the shared clock; a second claimer gets the ones after."""
    endpoint_id = _endpoint(conn, rate_limit=10.0, max_in_flight=100)
    _publish(conn, 20)
    first = claim(conn, [endpoint_id], rows=10, horizon=0.25)
    assert _turns_near(first, [0.0, 0.105, 0.21]), [r[SEND_IN] for r in first]
    with psycopg.connect(dsn) as other:
        second = claim(other, [endpoint_id], rows=10, horizon=0.25)
    assert second == []  # the next turn is 0.315 s away, beyond the horizon
    conn.execute("UPDATE outbox.endpoint_state SET next_turn = next_turn - interval '0.315 s'")
    conn.commit()
    third = claim(conn, [endpoint_id], rows=10, horizon=0.25)
    assert _turns_near(third, [0.0, 0.105, 0.21]), [r[SEND_IN] for r in third]


def _turns_near(rows: list[tuple[Any, ...]], expected: list[float]) -> bool:
    """The rows' turns are the expected ones, or up to 10 ms nearer: the statement reads the
    clock again as it returns them, a millisecond or more later on a busy machine."""
    turns = [float(r[SEND_IN]) for r in rows]
    return len(turns) == len(expected) and all(
        e - 0.01 <= t <= e + 1e-6 for t, e in zip(turns, expected, strict=True))


def test_unused_turns_and_slots_are_not_taken(conn: Conn) -> None:
    """A claim that finds fewer due rows than it was allowed keeps only what it uses."""
    endpoint_id = _endpoint(conn, rate_limit=1.0, max_in_flight=5)
    _publish(conn, 1)
    rows = claim(conn, [endpoint_id], rows=5, horizon=10.0)
    assert len(rows) == 1
    state = conn.execute(
        "SELECT extract(epoch FROM next_turn - now()) FROM outbox.endpoint_state").fetchone()
    leased = conn.execute("SELECT count(*) FROM outbox.endpoint_slots "
                          "WHERE expires_at > now()").fetchone()
    conn.commit()
    assert state is not None
    assert 0.5 < state[0] <= 1.05  # one turn used, 1.05/rate on
    assert leased == (1,)


def test_breaker_opens_at_n_failures_that_are_the_share_of_the_window(conn: Conn) -> None:
    """Failures and answers add up in the window; it opens at N failures that are at least
    --breaker-rate percent of its attempts, not before."""
    endpoint_id = _endpoint(conn, breaker_failures=3, max_in_flight=10)
    _publish(conn, 10)
    rows = claim(conn, [endpoint_id], rows=10)
    finish(conn, rows[0], "pending", verdict=False)
    finish(conn, rows[1], "pending", verdict=False)
    assert _state(conn, endpoint_id) == ("closed", 2, 2)
    for row in rows[2:6]:
        finish(conn, row, verdict=True)
    assert _state(conn, endpoint_id) == ("closed", 6, 2)
    finish(conn, rows[6], "pending", verdict=False)
    assert _state(conn, endpoint_id) == ("closed", 7, 3)  # 3 of 7: under half
    changes = finish(conn, rows[7], "pending", verdict=False)
    assert _state(conn, endpoint_id) == ("open", 8, 4)
    assert (endpoint_id, "closed", "open") in changes.changed
    conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() WHERE state = 'pending'")
    conn.commit()
    assert claim(conn, [endpoint_id], rows=10) == []  # open: nothing is claimed


def test_answers_wait_with_the_dispatcher_until_a_failure_brings_them(conn: Conn) -> None:
    """A healthy window is not written: the answers the dispatcher kept come with its next
    failure, and count in the share."""
    endpoint_id = _endpoint(conn, breaker_failures=2, max_in_flight=10)
    _publish(conn, 3)
    rows = claim(conn, [endpoint_id], rows=3)
    finish(conn, rows[0], verdict=True)
    assert _state(conn, endpoint_id) == ("closed", 0, 0)
    claimed = ClaimRow._make(rows[1])
    complete(conn, [Record(claimed.id, claimed.lease_token, "pending")], [],
             [[endpoint_id, 0, 1, [3, 0, 2]]])
    assert _state(conn, endpoint_id) == ("closed", 6, 1)
    finish(conn, rows[2], "pending", verdict=False)
    assert _state(conn, endpoint_id) == ("closed", 7, 2)  # 2 of 7


def test_failures_older_than_the_window_leave_it(conn: Conn) -> None:
    """Buckets a fifth of the window wide: a failure within the window still counts, one
    older than the window no longer does."""
    endpoint_id = _endpoint(conn, breaker_failures=3, max_in_flight=10,
                            breaker_window_seconds=30)
    _publish(conn, 6)
    rows = claim(conn, [endpoint_id], rows=6)
    finish(conn, rows[0], "pending", verdict=False)
    finish(conn, rows[1], "pending", verdict=False)
    conn.execute("UPDATE outbox.endpoint_state SET window_at = window_at - interval '12 s'")
    conn.commit()
    finish(conn, rows[2], "pending", verdict=False)
    assert _state(conn, endpoint_id) == ("open", 3, 3)
    conn.execute("UPDATE outbox.endpoint_state SET circuit = 'closed', "
                 "window_at = window_at - interval '37 s'")
    conn.commit()
    finish(conn, rows[3], "pending", verdict=False)
    assert _state(conn, endpoint_id) == ("closed", 1, 1)


def test_one_probe_after_the_cooldown_even_with_two_claimers(conn: Conn, dsn: str) -> None:
    """After the cool-down exactly one claim gets one delivery, marked as the probe."""
    endpoint_id = _endpoint(conn, breaker_failures=1, breaker_cooldown_seconds=30)
    _publish(conn, 5)
    finish(conn, claim(conn, [endpoint_id], rows=1)[0], "pending", verdict=False)
    assert _state(conn, endpoint_id)[0] == "open"
    conn.execute("UPDATE outbox.endpoint_state SET opened_at = now() - interval '31 s'")
    conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() WHERE state = 'pending'")
    conn.commit()
    with psycopg.connect(dsn) as other:
        first = claim(conn, [endpoint_id], rows=5)
        second = claim(other, [endpoint_id], rows=5)
    assert len(first) == 1
    assert first[0][PROBE] is True
    assert second == []
    assert _state(conn, endpoint_id)[0] == "half-open"
    finish(conn, first[0], verdict=True)
    assert _state(conn, endpoint_id) == ("closed", 0, 0)  # the count starts afresh
    assert len(claim(conn, [endpoint_id], rows=5)) == 4


def test_a_failed_probe_opens_the_circuit_again(conn: Conn) -> None:
    """The probe's retryable failure opens the circuit for another cool-down."""
    endpoint_id = _endpoint(conn, breaker_failures=1)
    _publish(conn, 2)
    finish(conn, claim(conn, [endpoint_id], rows=1)[0], "pending", verdict=False)
    conn.execute("UPDATE outbox.endpoint_state SET opened_at = now() - interval '1 hour'")
    conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() WHERE state = 'pending'")
    conn.commit()
    probe = claim(conn, [endpoint_id], rows=5)
    assert [r[PROBE] for r in probe] == [True]
    finish(conn, probe[0], "pending", verdict=False)
    row = conn.execute("SELECT circuit, opened_at > now() - interval '1 minute' "
                       "FROM outbox.endpoint_state").fetchone()
    conn.commit()
    assert row == ("open", True)


def test_a_dead_probe_holder_lets_another_probe(conn: Conn) -> None:
    """A half-open circuit whose probe's lease ran out sends another probe."""
    endpoint_id = _endpoint(conn, breaker_failures=1)
    _publish(conn, 3)
    finish(conn, claim(conn, [endpoint_id], rows=1)[0], "pending", verdict=False)
    conn.execute("UPDATE outbox.endpoint_state SET opened_at = now() - interval '1 hour'")
    conn.execute("UPDATE outbox.deliveries SET next_attempt_at = now() WHERE state = 'pending'")
    conn.commit()
    assert len(claim(conn, [endpoint_id], rows=5)) == 1  # the probe, then its holder dies
    assert claim(conn, [endpoint_id], rows=5) == []
    conn.execute("UPDATE outbox.endpoint_state SET probe_until = now() - interval '1 s'")
    conn.commit()
    again = claim(conn, [endpoint_id], rows=5)
    assert [r[PROBE] for r in again] == [True]


def test_breaker_off_never_opens(conn: Conn) -> None:
    """--breaker-failures 0: failures never open the circuit."""
    endpoint_id = _endpoint(conn, breaker_failures=0, max_in_flight=20)
    _publish(conn, 20)
    for row in claim(conn, [endpoint_id], rows=20):
        finish(conn, row, "pending", verdict=False)
    assert _state(conn, endpoint_id)[0] == "closed"


def test_a_refund_takes_back_the_attempt_and_a_release_keeps_the_last_error(conn: Conn) -> None:
    """Handed back: pending, due now, attempt refunded, last_error kept from before."""
    endpoint_id = _endpoint(conn)
    _publish(conn, 1)
    row = claim(conn, [endpoint_id], rows=1)[0]
    conn.execute("UPDATE outbox.deliveries SET last_error = 'earlier'")
    conn.commit()
    claimed = ClaimRow._make(row)
    complete(conn, [Record(claimed.id, claimed.lease_token, "released", refund=True)])
    after = conn.execute("SELECT state, attempts, last_error, next_attempt_at <= now() "
                         "FROM outbox.deliveries").fetchone()
    conn.commit()
    assert after == ("pending", 0, "earlier", True)
    assert row[ENDPOINT] == endpoint_id


def test_disabled_endpoints_are_not_claimed_but_keep_their_deliveries(conn: Conn) -> None:
    """Events published to a disabled endpoint wait as pending; the claim skips it."""
    endpoint_id = _endpoint(conn, enabled=False)
    _publish(conn, 2)
    assert claim(conn, [endpoint_id], rows=10) == []
    count = conn.execute("SELECT count(*) FROM outbox.deliveries WHERE state = 'pending'")
    assert count.fetchone() == (2,)
    conn.commit()


_MEMBER = f"{APPLICATION_NAME} member 0a1b2c3d "
"""The start of a member's application_name in one fleet; its id and beat follow."""


def _members(conn: Conn) -> set[str]:
    rows = conn.execute(queries["fleet_members"], {"pattern": _MEMBER + "%", "lease": 30.0,
                                                   "skew": SKEW}).fetchall()
    return {str(row[0]) for row in rows}


def _pose(conn: Conn, member: str, *, ahead: float = 0.0) -> None:
    """The session names itself the member ``member``, its beat ``ahead`` seconds past the
    database's clock: what anyone who reads pg_stat_activity can copy."""
    conn.execute("SELECT pg_catalog.set_config('application_name', %s || pg_catalog.floor("
                 "extract(epoch FROM now()) + %s)::bigint::text, false)",
                 (f"{_MEMBER}{member} ", ahead))


def test_only_the_members_own_role_with_a_beat_not_ahead_is_a_member(cluster: Cluster,
                                                                    dsn: str) -> None:
    """A session of another role posing as a member, or one whose beat is from the future,
    is no member; a session of the members' own role with a current beat is one."""
    with login_role(cluster) as stranger, \
            psycopg.connect(dsn, autocommit=True) as member, \
            psycopg.connect(role_dsn(dsn, stranger), autocommit=True) as poser, \
            psycopg.connect(dsn, autocommit=True) as twin:
        member.execute(queries["fleet_beat"], {"prefix": f"{_MEMBER}real "})
        assert _members(member) == {"real"}
        _pose(poser, "forged")
        _pose(twin, "future", ahead=3600)
        assert _members(member) == {"real"}
        assert _members(poser) == {"forged"}  # the poser sees only its own role's sessions
        _pose(twin, "twin", ahead=1)
        assert _members(member) == {"real", "twin"}
