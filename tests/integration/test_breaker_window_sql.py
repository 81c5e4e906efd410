"""The schema's breaker window functions (``outbox.circuit_*_v2``) agree with their Python twin
(tests/support/breaker_window.py), which the property tests of the rule play histories on."""

from __future__ import annotations

from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.breaker_window import BUCKETS, added, after, bucket, shifted

Conn = psycopg.Connection[Any]
_COUNTS = st.lists(st.integers(0, 10_000), max_size=BUCKETS)
_WINDOWS = st.sampled_from([0.5, 1.0, 7.0, 30.0, 3600.0])
_SETTINGS = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(counts=_COUNTS, age=st.floats(0, 20_000), window=_WINDOWS)
def test_the_window_shifts_as_its_twin(conn: Conn, counts: list[int], age: float,
                                       window: float) -> None:
    """circuit_window_v2 drops the buckets begun since the row was written, as the twin does;
    circuit_window_at_v2 is the start of the bucket now falls in."""
    row = conn.execute(
        "SELECT extract(epoch FROM now())::float8, extract(epoch FROM now())::float8 - %(age)s,"
        " outbox.circuit_window_v2(%(counts)s::int[], now() - make_interval(secs => %(age)s),"
        "                          %(window)s),"
        " extract(epoch FROM outbox.circuit_window_at_v2(%(window)s))::float8",
        {"counts": counts, "age": age, "window": window}).fetchone()
    conn.rollback()
    assert row is not None
    now, written, found, start = row
    assert found == shifted(counts, bucket(written, window), bucket(now, window))
    assert abs(start - bucket(now, window) * window / (BUCKETS - 1)) < 1e-3


def test_an_empty_window_is_empty(conn: Conn) -> None:
    """A row never written (window_at NULL) counts nothing."""
    row = conn.execute("SELECT outbox.circuit_window_v2('{1,2}', NULL, 30), "
                       "outbox.circuit_sum_v2('{}')").fetchone()
    conn.rollback()
    assert row == ([], 0)


@_SETTINGS
@given(counts=_COUNTS, others=_COUNTS, newest=st.integers(0, 1000))
def test_counts_add_and_sum_as_their_twin(conn: Conn, counts: list[int], others: list[int],
                                          newest: int) -> None:
    """circuit_add_v2 adds bucket by bucket, circuit_sum_v2 sums the six."""
    row = conn.execute("SELECT outbox.circuit_add_v2(%s::int[], %s::int[], %s), "
                       "outbox.circuit_sum_v2(%s::int[])",
                       (counts, others, newest, counts)).fetchone()
    conn.rollback()
    assert row == (added(counts, others, newest), sum(counts))


@_SETTINGS
@given(circuit=st.sampled_from(["closed", "open", "half-open"]),
       breaker_failures=st.integers(0, 20), rate=st.floats(1, 100),
       attempts=st.integers(0, 200), failures=st.integers(0, 200),
       answered=st.integers(0, 5), reported=st.integers(0, 5))
def test_the_state_after_a_batch_is_the_twins(conn: Conn, circuit: str, breaker_failures: int,
                                              rate: float, attempts: int, failures: int,
                                              answered: int, reported: int) -> None:
    """circuit_after_v2 decides as its twin, over any counts."""
    row = conn.execute("SELECT outbox.circuit_after_v2(%s, %s, %s, %s, %s, %s, %s)",
                       (circuit, breaker_failures, rate, attempts, failures, answered,
                        reported)).fetchone()
    conn.rollback()
    assert row == (after(circuit, breaker_failures, rate, attempts, failures, answered,
                         reported),)
