"""The breaker's window rule over generated attempt histories: the dispatcher's tally and the
schema's state row (its Python twin) open the circuit exactly when the rule says so."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.limits import circuit
from tests.support.breaker_window import BUCKETS, StateRow, bucket, rule_opens

START = 1_000_000.0


class _Clock:
    now = START

    def __call__(self) -> float:
        return self.now


@st.composite
def histories(draw: st.DrawFn) -> tuple[float, int, float, list[tuple[float, bool]]]:
    """A window, N, a rate, and attempts (when each ended, whether it failed), in order."""
    window = draw(st.sampled_from([1.0, 2.5, 10.0, 30.0]))
    failures = draw(st.integers(1, 12))
    rate = draw(st.sampled_from([1.0, 25.0, 50.0, 50.0, 80.0, 100.0]))
    gaps = st.one_of(st.just(0.0), st.floats(0, window / 8), st.floats(0, window * 1.5))
    share = draw(st.floats(0, 1))
    at, attempts = START, []
    for _ in range(draw(st.integers(1, 120))):
        at += draw(gaps)
        attempts.append((at, draw(st.floats(0, 1)) < share))
    return window, failures, rate, attempts


def _play(window: float, breaker_failures: int, rate: float,
          attempts: list[tuple[float, bool]]) -> int | None:
    """Each attempt its own batch, as one dispatcher writes it: the index of the attempt whose
    batch opened the circuit, or None."""
    clock = _Clock()
    tally = circuit.Tally(clock)
    row = StateRow(window, breaker_failures, rate)
    for i, (at, failed) in enumerate(attempts):
        clock.now = at
        verdicts: list[tuple[int, circuit.CircuitVerdict, float]] = [
            (1, "failed" if failed else "answered", window)]
        earlier = tally.earlier(1, window)
        took = row.complete(at, int(not failed), int(failed), earlier)
        circuit.settle(verdicts, tally, frozenset({1}) if took else frozenset())
        if row.circuit == "open":
            return i
    return None


def _counted(window: float, attempts: list[tuple[float, bool]], k: int) -> tuple[int, int]:
    """Attempts and failures up to the k-th that ended in its bucket or the five before."""
    now = bucket(attempts[k][0], window)
    kept = [failed for at, failed in attempts[: k + 1] if bucket(at, window) > now - BUCKETS]
    return len(kept), sum(kept)


@settings(max_examples=400, deadline=None)
@given(histories())
def test_the_circuit_opens_exactly_when_the_rule_holds(
        case: tuple[float, int, float, list[tuple[float, bool]]]) -> None:
    """It opens at the first failure after which, of the attempts that ended within the
    window (counted in six buckets of a fifth of it: the last window and at most a fifth
    more), N or more failed and they are at least the rate's share."""
    window, breaker_failures, rate, attempts = case
    expected = next((k for k, (_, failed) in enumerate(attempts)
                     if failed and rule_opens(*_counted(window, attempts, k),
                                              breaker_failures, rate)), None)
    assert _play(window, breaker_failures, rate, attempts) == expected


@settings(max_examples=300, deadline=None)
@given(histories())
def test_what_is_counted_is_the_last_window_and_at_most_a_fifth_more(
        case: tuple[float, int, float, list[tuple[float, bool]]]) -> None:
    """An opening never counts a failure older than 1.2 windows; and N failures within the
    last window with nothing but failures in the 1.2 windows before open it."""
    window, breaker_failures, rate, attempts = case
    opened = _play(window, breaker_failures, rate, attempts)
    for k, (now, failed) in enumerate(attempts):
        if not failed:
            continue
        recent = [f for at, f in attempts[: k + 1] if at > now - window]
        wider = [f for at, f in attempts[: k + 1] if at >= now - window * 1.2 - 1e-9]
        if k == opened:
            assert sum(wider) >= breaker_failures
        if all(wider) and sum(recent) >= breaker_failures:
            assert opened is not None
            assert opened <= k


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.sampled_from([1.0, 50.0, 100.0]))
def test_an_endpoint_failing_everything_opens_at_n_failures(breaker_failures: int,
                                                          rate: float) -> None:
    """Nothing but failures, close together: the N-th opens the circuit."""
    attempts = [(START + i * 0.01, True) for i in range(30)]
    assert _play(30.0, breaker_failures, rate, attempts) == breaker_failures - 1


def test_a_burst_among_answers_keeps_it_closed() -> None:
    """Five failures in every forty attempts (bursts of concurrent timeouts): never opens,
    whatever N; the same failures alone would."""
    attempts = [(START + i * 0.05, i % 40 >= 35) for i in range(800)]
    for breaker_failures in (1, 5, 10):
        assert _play(30.0, breaker_failures, 50.0, attempts) is None
    assert _play(30.0, 5, 50.0, [a for a in attempts if a[1]]) == 4
