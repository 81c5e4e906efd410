"""A model of deliveries' lives, checked step by step against the real statements.

Hypothesis plays a fleet and its operators in any order: claims (the claim
statement), results of the attempts (``policy.outcome.decide`` makes the
record, the complete statement writes it, with the circuit breaker's
verdict), leases extended, dispatchers dying (their leases back-dated) and
the upkeep rescuing their deliveries, late results from the leases they
lost, backoffs and cool-downs running out (back-dated too: nothing sleeps),
``outbox dead retry`` and ``outbox replay``. A plain Python model says what
the documentation (docs/concepts.md) promises for each step; after every step the database
must agree with it, and these hold:

- a delivery is in flight under one lease token at most: a result (or a lease
  extension) under any earlier token changes nothing; the result's verdict
  still counts for the circuit breaker, by design, since that attempt did
  reach the endpoint and the breaker counts the whole fleet's failures;
- attempts never exceed --max-attempts, except by design after a rescue:
  the attempt of a dispatcher that died stays charged (it may have reached
  the endpoint) and the delivery is claimed once more, so each rescue of a
  delivery at its last attempt allows one attempt more;
- a dead delivery is never claimed;
- request slots held never exceed --max-in-flight;
- the --max-pending counters add up to the undelivered deliveries.

Two events, one endpoint with small limits (3 attempts, one slot, a breaker
opening after 2 failures). Backoff, cool-down, breaker window and lease are an hour each,
so that no real time passing on a loaded machine can make a step come due.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import outbox
from dispatcher.policy.model import AttemptResult, ClaimRow, Delivery, Endpoint, EventData
from dispatcher.policy.outcome import decide
from outbox import admin
from outbox.endpoints import EndpointSpec, add_endpoint
from outbox.sql import queries
from tests.support.claiming import (
    ATTEMPTS,
    ENDPOINT,
    ID,
    PROBE,
    SLOT,
    SLOT_TOKEN,
    TOKEN,
    claim,
    complete,
)

Conn = psycopg.Connection[Any]

MAX_ATTEMPTS = 3
BREAKER_FAILURES = 2
SLOTS = 1
HOUR = 3600.0
EVENTS = 2
NAME = "model"

# Each run is a fresh endpoint and two events; each step a few statements.
MODEL = settings(max_examples=60, stateful_step_count=50, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])

# What each kind of answer is, for decide() and for the circuit breaker.
ANSWERS = {
    "success": AttemptResult(status=200),
    "retryable": AttemptResult(status=503, body_excerpt="unavailable"),
    "permanent": AttemptResult(status=400, body_excerpt="bad request"),
}
# Retryable failures twice as often: the circuit opens only after consecutive ones.
OUTCOMES = st.sampled_from(["retryable", "success", "retryable", "permanent"])


@dataclass(frozen=True)
class Claim:
    """One claim of one delivery: what its dispatcher holds, and may report late."""

    delivery: Delivery
    slot: int | None
    slot_token: uuid.UUID | None


@dataclass
class Row:
    """The model of one delivery row."""

    id: int
    event: uuid.UUID
    state: str = "pending"
    attempts: int = 0
    due: bool = True
    claim: Claim | None = None  # the live claim while in flight
    lease_expired: bool = False
    last_status: int | None = None
    beyond: int = 0  # rescues at or past the last attempt: attempts allowed beyond the max


@dataclass
class SlotModel:
    """One request slot of the endpoint (--max-in-flight)."""

    token: uuid.UUID | None = None
    live: bool = False  # leased and not expired


@dataclass
class Circuit:
    """The endpoint's circuit breaker, shared by the fleet."""

    state: str = "closed"
    attempts: int = 0  # the window's (an hour: nothing leaves it during a test)
    failures: int = 0
    cooldown_over: bool = False  # open: its cool-down has run out
    probe_lease_over: bool = False  # half-open: its probe's lease has run out

    def judge(self, answered: bool) -> None:
        """One attempt's word (docs/concepts.md, "Retries, dead letters and limits").

        Every attempt counts in the window, but an answer to a closed circuit whose
        window holds no failure stays with its dispatcher (which brings it with its
        next failure: none here, each result is its own batch). An answer closes a
        half-open circuit and starts the count afresh; a retryable failure opens a
        closed circuit once the window holds --breaker-failures failures and they
        are half its attempts or more (--breaker-rate 50), and a half-open one at
        once. An open circuit stays open (only its probe, after the cool-down, may
        close it).
        """
        if answered:
            if self.state == "half-open":
                self.state, self.attempts, self.failures = "closed", 0, 0
            elif self.state != "closed" or self.failures:
                self.attempts += 1
            return
        self.attempts += 1
        self.failures += 1
        if self.state == "half-open" or (self.state == "closed"
                                         and self.failures >= BREAKER_FAILURES
                                         and self.failures * 2 >= self.attempts):
            self.state, self.cooldown_over = "open", False


@dataclass
class Model:
    """What the documentation says the database holds."""

    rows: dict[int, Row] = field(default_factory=dict)
    slots: list[SlotModel] = field(default_factory=lambda: [SlotModel() for _ in range(SLOTS)])
    circuit: Circuit = field(default_factory=Circuit)
    old_claims: list[Claim] = field(default_factory=list)


class DeliveryMachine(RuleBasedStateMachine):
    """The model and the database side by side, one endpoint's deliveries."""

    def __init__(self, conn: Conn) -> None:
        super().__init__()
        self.conn = conn
        self.model = Model()
        self.events: list[uuid.UUID] = []  # in publish order: draws must not depend on ids
        self.endpoint_id = 0
        self.policy = Endpoint(id=0, name=NAME, url="http://127.0.0.1:9/")

    # -- setup and helpers -------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        """A fresh endpoint, and two events published to it."""
        conn = self.conn
        conn.rollback()
        conn.execute("TRUNCATE outbox.endpoints, outbox.endpoint_state, outbox.endpoint_slots,"
                     " outbox.endpoint_backlog, outbox.events, outbox.deliveries")
        spec = EndpointSpec(name=NAME, url="http://127.0.0.1:9/", max_attempts=MAX_ATTEMPTS,
                            min_backoff=HOUR, max_backoff=HOUR, max_in_flight=SLOTS,
                            breaker_failures=BREAKER_FAILURES, breaker_cooldown=HOUR,
                            breaker_window=HOUR, max_pending=1000)
        self.endpoint_id = add_endpoint(conn, spec)
        self.policy = Endpoint(id=self.endpoint_id, name=NAME, url=spec.url,
                               max_attempts=MAX_ATTEMPTS, min_backoff=HOUR, max_backoff=HOUR,
                               max_in_flight=SLOTS, breaker_failures=BREAKER_FAILURES)
        conn.commit()
        outbox.publish_many(conn, [outbox.Event("model.event", {"n": n}) for n in range(EVENTS)])
        conn.commit()
        for delivery_id, event_id in self._query(
                "SELECT id, event_id FROM outbox.deliveries ORDER BY id"):
            self.model.rows[delivery_id] = Row(delivery_id, event_id)
            self.events.append(event_id)

    def _query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        rows = self.conn.execute(sql, params).fetchall()
        self.conn.commit()
        return rows

    def _in_flight(self) -> list[Row]:
        return [r for r in self.model.rows.values() if r.state == "in_flight"]

    def _complete(self, claim: Claim, answer: str, *,
                  verdict: bool) -> tuple[set[int], list[tuple[Any, ...]]]:
        """decide() on an answer, written by the complete statement as the completer does."""
        now = datetime.now(UTC)
        record = decide(claim.delivery, self.policy, ANSWERS[answer], now, lambda: 0.5).record
        slots = ([] if claim.slot is None
                 else [[self.endpoint_id, claim.slot, str(claim.slot_token)]])
        circuits = ([[self.endpoint_id, int(answer != "retryable"), int(answer == "retryable"),
                      []]]
                    if verdict else [])
        completed = complete(self.conn, [record], slots, circuits)
        return set(completed.written), [tuple(change) for change in completed.changed]

    def _free_slot(self, claim: Claim) -> None:
        """The complete statement frees a slot only under the token it was leased with."""
        if claim.slot is not None and self.model.slots[claim.slot].token == claim.slot_token:
            self.model.slots[claim.slot] = SlotModel()

    def _judge(self, answer: str, verdict: bool) -> tuple[str, str]:
        before = self.model.circuit.state
        if verdict:
            self.model.circuit.judge(answered=answer != "retryable")
        return before, self.model.circuit.state

    # -- rules ---------------------------------------------------------------------------

    @precondition(lambda self: any(r.state == "pending" and r.due
                                   for r in self.model.rows.values()))
    @rule()
    def claim_due(self) -> None:
        """A dispatcher claims: due pending deliveries, within the slots and the circuit."""
        model = self.model
        circuit = model.circuit
        probe = ((circuit.state == "open" and circuit.cooldown_over)
                 or (circuit.state == "half-open" and circuit.probe_lease_over))
        allowed = 5 if circuit.state == "closed" else 1 if probe else 0
        free = [n for n, s in enumerate(model.slots) if not s.live]
        granted = min(allowed, len(free))
        eligible = {r.id for r in model.rows.values() if r.state == "pending" and r.due}
        claimed = claim(self.conn, [self.endpoint_id], rows=5)

        assert len(claimed) == min(len(eligible), granted)
        assert len({c[ID] for c in claimed}) == len(claimed)
        for rank, found in enumerate(claimed):
            row = model.rows[found[ID]]
            assert row.id in eligible, f"claimed a {row.state} delivery (due: {row.due})"
            assert found[PROBE] is probe
            assert found[SLOT] == free[rank]
            row.state, row.attempts, row.lease_expired = "in_flight", row.attempts + 1, False
            assert found[ATTEMPTS] == row.attempts
            sent = self._event(found)
            row.claim = Claim(Delivery(row.id, found[ENDPOINT], sent, found[ATTEMPTS],
                                       found[TOKEN], probe), found[SLOT], found[SLOT_TOKEN])
            model.slots[found[SLOT]] = SlotModel(found[SLOT_TOKEN], live=True)
        if probe and claimed:
            circuit.state, circuit.probe_lease_over = "half-open", False

    def _event(self, found: tuple[Any, ...]) -> EventData:
        """The event as the dispatcher builds it from a claimed row."""
        return ClaimRow._make(found).delivery(0.0).event

    @precondition(lambda self: self._in_flight())
    @rule(data=st.data(), answer=OUTCOMES)
    def attempt_ends(self, data: st.DataObject, answer: str) -> None:
        """A request ends: delivered, retried after its backoff, or dead; the circuit told."""
        row = data.draw(st.sampled_from(self._in_flight()))
        claim_ = row.claim
        assert claim_ is not None
        written, changes = self._complete(claim_, answer, verdict=True)
        assert written == {row.id}
        probe = claim_.delivery.probe
        if answer == "success":
            row.state = "delivered"
        elif answer == "permanent" or (not probe and row.attempts >= MAX_ATTEMPTS):
            row.state = "dead"
        else:  # retried after its backoff; a failed probe's attempt is taken back
            row.state, row.due = "pending", False
            row.attempts -= int(probe)
        row.last_status = ANSWERS[answer].status
        self._release(row)
        self._check_changes(changes, *self._judge(answer, verdict=True))

    def _release(self, row: Row, *, free_slot: bool = True) -> None:
        """The row's claim is over: its slot freed (unless rescued), its token now old."""
        assert row.claim is not None
        if free_slot:
            self._free_slot(row.claim)
        self.model.old_claims.append(row.claim)
        row.claim, row.lease_expired = None, False

    def _check_changes(self, changes: list[tuple[Any, ...]], before: str, after: str) -> None:
        """The complete statement reports a circuit's change exactly when the model sees one."""
        expected = [] if before == after else [(self.endpoint_id, before, after)]
        assert changes == expected

    @precondition(lambda self: any(not r.lease_expired for r in self._in_flight()))
    @rule(data=st.data())
    def dispatcher_dies(self, data: st.DataObject) -> None:
        """The dispatcher holding a claim dies: its lease (and slot, and probe) run out."""
        row = data.draw(st.sampled_from([r for r in self._in_flight() if not r.lease_expired]))
        claim_ = row.claim
        assert claim_ is not None
        self.conn.execute("UPDATE outbox.deliveries SET lease_expires_at = now() - interval "
                          "'1 second' WHERE id = %s AND lease_token = %s",
                          (row.id, claim_.delivery.lease_token))
        self.conn.execute("UPDATE outbox.endpoint_slots SET expires_at = now() - interval "
                          "'1 second' WHERE endpoint_id = %s AND slot = %s AND lease_token = %s",
                          (self.endpoint_id, claim_.slot, claim_.slot_token))
        if claim_.delivery.probe and self.model.circuit.state == "half-open":
            self.conn.execute("UPDATE outbox.endpoint_state SET probe_until = now() - interval "
                              "'1 second' WHERE endpoint_id = %s", (self.endpoint_id,))
            self.model.circuit.probe_lease_over = True
        self.conn.commit()
        row.lease_expired = True
        slot = self.model.slots[claim_.slot] if claim_.slot is not None else None
        if slot is not None and slot.token == claim_.slot_token:
            slot.live = False

    @precondition(lambda self: self._in_flight() or self.model.old_claims)
    @rule(data=st.data())
    def leases_extended(self, data: st.DataObject) -> None:
        """A dispatcher extends the leases it holds; under a token it lost, nothing changes.

        One that froze past its lease and was not rescued yet holds its delivery again
        (nobody took it over); a slot it lost to another claim stays lost.
        """
        live = [r.claim for r in self._in_flight() if r.claim is not None]
        held = data.draw(st.lists(st.sampled_from(live + self.model.old_claims),
                                  min_size=1, max_size=3, unique_by=id))
        slots = [[self.endpoint_id, c.slot, str(c.slot_token)] for c in held
                 if c.slot is not None]
        self.conn.execute(queries["extend_leases"], {
            "lease_seconds": HOUR, "slots": json.dumps(slots),
            "ids": [c.delivery.id for c in held],
            "tokens": [c.delivery.lease_token for c in held]})
        self.conn.commit()
        for claim_ in held:
            row = self.model.rows[claim_.delivery.id]
            if row.claim is claim_:
                row.lease_expired = False
            slot = self.model.slots[claim_.slot] if claim_.slot is not None else None
            if slot is not None and slot.token == claim_.slot_token:
                slot.live = True

    @precondition(lambda self: any(r.lease_expired for r in self._in_flight()))
    @rule()
    def rescue(self) -> None:
        """The upkeep puts deliveries whose lease ran out back to pending, attempt charged."""
        rescued = {r[0] for r in self._query(queries["rescue_expired"])}
        expired = {r.id for r in self._in_flight() if r.lease_expired}
        assert rescued == expired
        for row_id in expired:
            row = self.model.rows[row_id]
            if row.attempts >= MAX_ATTEMPTS:
                row.beyond += 1  # it will be claimed again: one attempt beyond the max
            row.state, row.due = "pending", True
            self._release(row, free_slot=False)  # the slot's own lease ran out with it

    @precondition(lambda self: self.model.old_claims)
    @rule(data=st.data(), answer=OUTCOMES, verdict=st.booleans())
    def late_result(self, data: st.DataObject, answer: str, verdict: bool) -> None:
        """A result under a lost lease (or written already) changes no delivery and no slot.

        Its verdict still counts for the circuit: the attempt did reach the endpoint,
        and the breaker counts the fleet's failures whoever made them.
        """
        claim_ = data.draw(st.sampled_from(self.model.old_claims))
        written, changes = self._complete(claim_, answer, verdict=verdict)
        assert written == set()
        self._free_slot(claim_)
        self._check_changes(changes, *self._judge(answer, verdict))

    @precondition(lambda self: any(r.state == "pending" and not r.due
                                   for r in self.model.rows.values()))
    @rule(data=st.data())
    def backoff_passes(self, data: st.DataObject) -> None:
        """A retried delivery's backoff runs out."""
        row = data.draw(st.sampled_from([r for r in self.model.rows.values()
                                         if r.state == "pending" and not r.due]))
        # An hour back: older than anything made due during the run, so that which of two
        # due deliveries the claim takes first never depends on how fast steps ran.
        self._query("UPDATE outbox.deliveries SET next_attempt_at = now() - interval '1 hour'"
                    " WHERE id = %s RETURNING id", (row.id,))
        row.due = True

    @precondition(lambda self: self.model.circuit.state == "open"
                  and not self.model.circuit.cooldown_over)
    @rule()
    def cooldown_passes(self) -> None:
        """An open circuit's cool-down runs out."""
        self._query("UPDATE outbox.endpoint_state SET opened_at = opened_at - interval "
                    "'2 hours' WHERE endpoint_id = %s RETURNING 1", (self.endpoint_id,))
        self.model.circuit.cooldown_over = True

    @precondition(lambda self: any(r.state == "dead" for r in self.model.rows.values()))
    @rule(data=st.data())
    def dead_retry(self, data: st.DataObject) -> None:
        """`outbox dead retry --event-id`: the event's dead deliveries pending, attempts reset."""
        event_id = data.draw(st.sampled_from([e for e in self.events if any(
            r.event == e and r.state == "dead" for r in self.model.rows.values())]))
        result = admin.retry_dead(self.conn, event_ids=[event_id])
        dead = [r for r in self.model.rows.values() if r.event == event_id and r.state == "dead"]
        assert result.retried == len(dead)
        for row in dead:
            row.state, row.attempts, row.due, row.beyond = "pending", 0, True, 0

    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        """`outbox replay --event-id`: a new delivery, unless one is pending or in flight."""
        event_id = data.draw(st.sampled_from(self.events))
        result = admin.replay(self.conn, NAME, event_ids=[event_id])
        busy = any(r.event == event_id and r.state in ("pending", "in_flight")
                   for r in self.model.rows.values())
        assert (result.replayed, result.skipped) == ((0, 1) if busy else (1, 0))
        if not busy:
            (new_id,) = self._query(
                "SELECT max(id) FROM outbox.deliveries WHERE event_id = %s", (event_id,))[0]
            assert new_id not in self.model.rows
            self.model.rows[new_id] = Row(new_id, event_id)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def rows_agree(self) -> None:
        """Every delivery row is as the model says: state, attempts, lease, due, status."""
        found = self._query(
            "SELECT id, state, attempts, lease_token, next_attempt_at <= now(), last_status,"
            "       finished_at IS NOT NULL FROM outbox.deliveries ORDER BY id")
        assert [r[0] for r in found] == sorted(self.model.rows)
        for row_id, state, attempts, token, due, last_status, finished in found:
            row = self.model.rows[row_id]
            assert (state, attempts, last_status) == (row.state, row.attempts, row.last_status)
            assert finished is (state in ("delivered", "dead"))
            if state == "in_flight":  # one token: the live claim's, never an earlier one
                assert row.claim is not None
                assert token == row.claim.delivery.lease_token
                assert all(old.delivery.lease_token != token for old in self.model.old_claims)
            else:
                assert token is None
            if state == "pending":
                assert due is row.due

    @invariant()
    def attempts_within_the_limit(self) -> None:
        """Attempts stay within --max-attempts, plus one per rescue at the last attempt."""
        for row in self.model.rows.values():
            assert 0 <= row.attempts <= MAX_ATTEMPTS + row.beyond

    @invariant()
    def circuit_agrees(self) -> None:
        """The fleet's circuit for the endpoint is the model's, with its failure count."""
        found = self._query("SELECT circuit, outbox.circuit_sum_v2(window_attempts), "
                            "outbox.circuit_sum_v2(window_failures) FROM outbox.endpoint_state "
                            "WHERE endpoint_id = %s", (self.endpoint_id,))
        circuit = self.model.circuit
        assert found == [(circuit.state, circuit.attempts, circuit.failures)]

    @invariant()
    def slots_within_max_in_flight(self) -> None:
        """Request slots held (leased, not expired) never exceed --max-in-flight."""
        found = self._query("SELECT slot, lease_token, expires_at > now() "
                            "FROM outbox.endpoint_slots WHERE endpoint_id = %s ORDER BY slot",
                            (self.endpoint_id,))
        assert len(found) == SLOTS
        assert sum(live for _, _, live in found) <= SLOTS
        for slot, token, live in found:
            assert (token, live) == (self.model.slots[slot].token, self.model.slots[slot].live)

    @invariant()
    def backlog_counts_add_up(self) -> None:
        """The --max-pending counters sum to the pending and in-flight deliveries."""
        (held,) = self._query("SELECT coalesce(sum(undelivered), 0) FROM outbox.endpoint_backlog"
                              " WHERE endpoint_id = %s", (self.endpoint_id,))[0]
        undelivered = sum(r.state in ("pending", "in_flight") for r in self.model.rows.values())
        assert held == undelivered


def test_deliveries_follow_the_model(conn: Conn) -> None:
    """Claims, results, deaths, rescues, late results, retries and replays agree with the model."""
    run_state_machine_as_test(lambda: DeliveryMachine(conn), settings=MODEL)
