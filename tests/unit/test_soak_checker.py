"""The soak's checker finds each broken promise in a small, hand-made history."""

from __future__ import annotations

from tests.soak.checker import (
    Arrival,
    Event,
    Limits,
    Report,
    busiest_second,
    check,
    most_at_once,
)

LIMITS = {"orders": Limits(max_in_flight=2), "audit": Limits(max_in_flight=1, rate_limit=2.0)}


def _event(n: int, key: str | None = None, *, rolled_back: bool = False,
           endpoints: tuple[str, ...] = ("orders",)) -> Event:
    return Event(f"e{n}", key, endpoints, 0 if rolled_back else n, 0.0, rolled_back)


def _hit(n: int, start: float, *, end: float | None = None, status: int = 200,
         key: str | None = None, endpoint: str = "orders") -> Arrival:
    return Arrival(endpoint, (f"e{n}",), key, status, start, start + 0.1 if end is None else end)


def _check(arrivals: list[Arrival], events: list[Event]) -> Report:
    return check(arrivals, events, LIMITS, Report())


def test_a_clean_history_passes() -> None:
    events = [_event(1, "k"), _event(2, "k"), _event(3)]
    arrivals = [_hit(1, 1.0, status=503, key="k"), _hit(1, 2.0, key="k"), _hit(2, 3.0, key="k"),
                _hit(3, 1.0)]
    report = _check(arrivals, events)
    assert report.ok()
    assert (report.events, report.delivered, report.duplicates) == (3, 3, 0)


def test_an_event_never_answered_2xx_is_lost() -> None:
    report = _check([_hit(1, 1.0, status=503)], [_event(1)])
    assert report.lost == 1
    assert not report.ok()


def test_each_endpoint_of_an_event_must_be_reached() -> None:
    report = _check([_hit(1, 1.0)], [_event(1, endpoints=("orders", "audit"))])
    assert (report.delivered, report.lost) == (1, 1)


def test_a_rolled_back_event_that_arrives_is_counted() -> None:
    report = _check([_hit(9, 1.0)], [_event(9, rolled_back=True)])
    assert report.rolled_back_sent == 1
    assert not report.ok()


def test_duplicates_are_allowed_up_to_the_bound() -> None:
    report = Report(duplicates_allowed=1)
    check([_hit(1, 1.0), _hit(1, 5.0)], [_event(1)], LIMITS, report)
    assert report.duplicates == 1
    assert report.ok()
    report = check([_hit(1, 1.0), _hit(1, 5.0), _hit(1, 9.0)], [_event(1)], LIMITS, Report())
    assert not report.ok()


def test_a_key_delivered_out_of_order_is_a_violation() -> None:
    events = [_event(1, "k"), _event(2, "k")]
    report = _check([_hit(2, 1.0, key="k"), _hit(1, 2.0, key="k")], events)
    assert report.order_violations == 1


def test_two_requests_of_one_key_at_once_are_a_violation() -> None:
    events = [_event(1, "k"), _event(2, "k")]
    report = _check([_hit(1, 1.0, end=2.0, key="k"), _hit(2, 1.5, end=2.5, key="k")], events)
    assert report.order_violations == 1


def test_a_redelivery_of_the_last_delivered_event_is_in_order() -> None:
    events = [_event(1, "k"), _event(2, "k")]
    arrivals = [_hit(1, 1.0, key="k"), _hit(1, 2.0, key="k"), _hit(2, 3.0, key="k")]
    assert _check(arrivals, events).order_violations == 0


def test_more_requests_at_once_than_max_in_flight_is_a_violation() -> None:
    events = [_event(n) for n in (1, 2, 3)]
    arrivals = [_hit(n, 1.0, end=2.0) for n in (1, 2, 3)]
    report = _check(arrivals, events)
    assert report.limit_violations == 1
    assert any("at most 3 requests at once" in note for note in report.notes)


def test_a_rate_above_the_limit_is_a_violation() -> None:
    events = [_event(n, endpoints=("audit",)) for n in range(1, 6)]
    arrivals = [_hit(n, 1.0 + n * 0.15, endpoint="audit") for n in range(1, 6)]
    report = _check(arrivals, events)
    assert report.limit_violations >= 1


def test_interval_and_window_helpers() -> None:
    assert most_at_once([(0, 1), (1, 2)]) == 1  # one ends as the next begins
    assert most_at_once([(0, 2), (1, 3), (1.5, 1.6)]) == 3
    assert busiest_second([0.0, 0.5, 0.99, 1.0, 1.5]) == 3
    assert busiest_second([]) == 0


def test_a_starved_delivery_fails_the_report() -> None:
    """A claimable delivery left unclaimed past the threshold makes the run fail."""
    report = Report(starved=1)
    assert not report.ok()
    assert report.summary()["starved"] == 1


def test_fairness_counts_the_noisy_requests_begun_before_a_quiet_events_first() -> None:
    """Per quiet event at the shared endpoint: the noisy requests that began after its commit
    and before its first request (a failed one counts); the 95th percentile is held to
    FAIR_AHEAD."""
    noisy = [Arrival("shared", (f"x{n}",), None, 200, 0.505 + n * 0.01, 0.6 + n * 0.01,
                     "noisy") for n in range(2000)]  # one every 10 ms from 0.5 s to 20.5 s
    quiet = [Event("q0", None, ("shared",), 1, 0.0, tenant="quiet"),
             Event("q1", None, ("shared",), 2, 10.0, tenant="quiet"),
             Event("q2", None, ("shared",), 3, 2.0, tenant="quiet")]
    firsts = [Arrival("shared", ("q0",), None, 200, 1.0, 1.1, "quiet"),    # 50 began before
              Arrival("shared", ("q1",), None, 503, 10.5, 10.6, "quiet"),  # 50, first try
              Arrival("shared", ("q1",), None, 200, 19.0, 19.1, "quiet"),
              Arrival("shared", ("q2",), None, 200, 20.0, 20.1, "quiet")]  # 1,800
    report = check([*noisy, *firsts], quiet, {}, Report())
    assert (report.fair_events, report.fair_ahead_max) == (3, 1800)
    assert not report.ok()  # the 95th percentile of three is the largest
    fine = check([*noisy, *firsts[:3]], quiet[:2], {}, Report())
    assert (fine.fair_ahead_p95, fine.lost, fine.ok()) == (50, 0, True)
