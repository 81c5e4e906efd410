"""The chaos soak: a fleet delivering under every fault at once, then a check of the history.

    ./dev soak [--minutes 10] [--rate 180] [--seed N] [--endpoints N]

One throwaway PostgreSQL (fsync on, data on disk), one receiver, three
dispatchers, three endpoints: ``orders`` (every ``order.*`` event, half of them
keyed over 200 customers, --max-in-flight 16), ``audit`` (the
``order.audited`` events only, --max-in-flight 4 and --rate-limit 50) and
``shared`` (the ``tenant.*`` events, --max-in-flight 8). Producers publish
``--rate`` events a second in transactions of one to five events, 2 % of
them rolled back, 5 % of the events for one of five quiet tenants at
``shared``; beside them a noisy tenant publishes bursts of 500 events there
(80 a second on average), keyed over the same names as the quiet ones (key
order is per tenant). The fairness invariant: at the 95th percentile, a
quiet tenant's event goes before 200 of the noisy tenant's requests have
begun since its commit (``checker.FAIR_AHEAD``). Meanwhile:

- the receiver answers 20 % of requests 503 and hangs on 1 % past the
  endpoints' 2 s timeout (then answers 503), and answers nothing but 503 for
  30 s from 40 % of the run on (the circuits must open);
- a random dispatcher is SIGKILLed every 10-20 s and started again;
- PostgreSQL is crash-stopped (``pg_ctl stop -m immediate``) and restarted
  at 25 % and 65 % of the run.

With ``--endpoints N`` (the many-endpoints mode) there are N more
endpoints, ``c0`` .. ``cN-1``, one per customer (endpoint ``cI`` takes the
``customer.I`` events; --max-in-flight 4), and half of the events go to one
of them at random. In either mode a watcher samples the database every
second for deliveries that stay due and claimable (endpoint enabled,
circuit closed, nothing earlier of their key unfinished) beside idle
capacity (a free slot, at most half the endpoint's --max-in-flight in
flight) for longer than ``UNCLAIMED`` seconds (ten poll intervals), outside
the seconds after a database restart; the report counts them as
``starved`` and gives the longest such wait.

Then producing stops, the fleet drains, and ``tests.soak.checker`` judges the
receiver's journal against what was committed and rolled back. The report's
last line is one JSON object; the exit code is 0 only when nothing was lost,
nothing rolled back was sent, key order and the endpoints' limits held, and
duplicates stayed within what the kills allow (deliveries rescued from a
dead dispatcher's leases, and requests answered after the sender gave up).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

import psycopg

import outbox
from outbox.endpoints import EndpointSpec, add_endpoint
from outbox.migrate import migrate
from outbox.testing import Receiver, Request, Response, TemporaryPostgres, free_port
from tests.soak.checker import Arrival, Event, Limits, Report, check

TIMEOUT = 2.0
HANG = 3.0
LIMITS = {"orders": Limits(max_in_flight=16), "audit": Limits(max_in_flight=4, rate_limit=50.0),
          "shared": Limits(max_in_flight=8)}
QUIET_TENANTS = 5
NOISY_BURST = 500
"""Events of the noisy tenant per transaction; NOISY_RATE events a second on average."""
NOISY_RATE = 80.0
DISPATCHERS = 3
KEYS = 200
POLL = 0.5
UNCLAIMED = 10 * POLL
"""Seconds a claimable delivery may stay due and unclaimed before the watcher counts it."""
CUSTOMER = Limits(max_in_flight=4)
STARVED = """
SELECT e.name, d.id, d.key, d.attempts
FROM outbox.deliveries d
JOIN outbox.endpoints e ON e.id = d.endpoint_id AND e.enabled AND e.removed_at IS NULL
JOIN outbox.endpoint_state s ON s.endpoint_id = d.endpoint_id AND s.circuit = 'closed'
WHERE d.state = 'pending' AND d.next_attempt_at < now() - make_interval(secs => %s)
  AND (e.rate_limit IS NULL OR s.next_turn < now())
  AND (d.key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox.deliveries p
        WHERE p.endpoint_id = d.endpoint_id AND p.key = d.key AND p.seq < d.seq
          AND p.state IN ('pending', 'in_flight')))
  AND EXISTS (SELECT 1 FROM outbox.endpoint_slots sl
              WHERE sl.endpoint_id = d.endpoint_id AND sl.expires_at < now())
  AND (SELECT count(*) FROM outbox.deliveries f
       WHERE f.endpoint_id = d.endpoint_id AND f.state = 'in_flight') <= e.max_in_flight / 2
"""


class Journal:
    """The receiver's record of every request, and its scripted answers."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lock = threading.Lock()
        self.arrivals: list[Arrival] = []
        self.outage = False

    async def __call__(self, request: Request) -> Response:
        start = time.time()
        endpoint = request.path.strip("/")
        body = json.loads(request.body)
        roll = self.rng.random()
        if self.outage or roll < 0.20:
            status = 503
        elif roll < 0.21:
            await asyncio.sleep(HANG)
            status = 503
        else:
            status = 200
        # A request its sender gave up on (its deadline) holds no slot past it.
        end = min(time.time(), start + TIMEOUT - 0.1)
        key = body.get("key")
        with self.lock:
            self.arrivals.append(Arrival(endpoint, (str(body["id"]),), key, status, start, end,
                                         body.get("tenant")))
        return Response(status)


class Fleet:
    """The dispatcher processes, each restartable in place; their logs appended to files."""

    def __init__(self, dsn: str, logs: Path) -> None:
        self.dsn = dsn
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * DISPATCHERS
        self.kills = 0

    def start(self, index: int) -> None:
        log = (self.logs / f"dispatcher-{index}.log").open("ab")
        self.procs[index] = subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "--dsn", self.dsn, "--metrics-host",
             "127.0.0.1", "--metrics-port", str(free_port()), "--poll-interval", str(POLL),
             "--lease", "5", "--shutdown-grace", "2", "--retention", "0"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def kill_one(self, rng: random.Random) -> None:
        index = rng.randrange(DISPATCHERS)
        proc = self.procs[index]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.kills += 1
        self.start(index)

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


class Producers:
    """Publish at a rate, 2 % of transactions rolled back; survive database restarts."""

    def __init__(self, dsn: str, rate: float, rng: random.Random, customers: int = 0, *,
                 noisy: bool = False) -> None:
        """``noisy``: the noisy tenant's bursts at the shared endpoint, NOISY_BURST events
        a transaction, instead of the mixed traffic."""
        self.dsn = dsn
        self.rate = rate
        self.rng = rng
        self.customers = customers
        self.noisy = noisy
        self.events: list[Event] = []
        self.in_doubt: list[tuple[list[outbox.Event], list[str], list[tuple[str, ...]], float]] = []
        self.stopping = threading.Event()

    def _batch(self) -> tuple[list[outbox.Event], list[tuple[str, ...]]]:
        batch: list[outbox.Event] = []
        routes: list[tuple[str, ...]] = []
        if self.noisy:
            for _ in range(NOISY_BURST):
                key = f"customer-{self.rng.randrange(KEYS)}" if self.rng.random() < 0.5 else None
                batch.append(outbox.Event("tenant.bulk", {"n": self.rng.random()}, key=key,
                                          tenant="noisy"))
                routes.append(("shared",))
            return batch, routes
        for _ in range(self.rng.randint(1, 5)):
            if self.rng.random() < 0.05:  # a quiet tenant; keys shared with the noisy one's
                key = f"customer-{self.rng.randrange(KEYS)}" if self.rng.random() < 0.5 else None
                batch.append(outbox.Event("tenant.quiet", {"n": self.rng.random()}, key=key,
                                          tenant=f"quiet-{self.rng.randrange(QUIET_TENANTS)}"))
                routes.append(("shared",))
                continue
            audited = self.rng.random() < 0.1
            key = f"customer-{self.rng.randrange(KEYS)}" if self.rng.random() < 0.5 else None
            if self.customers and self.rng.random() < 0.5:
                customer = self.rng.randrange(self.customers)
                batch.append(outbox.Event(f"customer.{customer}", {"n": self.rng.random()},
                                          key=key))
                routes.append((f"c{customer}",))
                continue
            event_type = "order.audited" if audited else "order.created"
            batch.append(outbox.Event(event_type, {"n": self.rng.random()}, key=key))
            routes.append(("orders", "audit") if audited else ("orders",))
        return batch, routes

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        next_at = time.monotonic()
        while not self.stopping.is_set():
            batch, routes = self._batch()
            next_at += len(batch) / self.rate
            time.sleep(max(0.0, next_at - time.monotonic()))
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=3)
                ids = [str(i) for i in outbox.publish_many(conn, batch)]
                if self.rng.random() < 0.02:
                    conn.rollback()
                    self.events += [Event(i, e.key, r, 0, time.time(), rolled_back=True,
                                          tenant=e.tenant)
                                    for i, e, r in zip(ids, batch, routes, strict=True)]
                    continue
                try:
                    conn.commit()
                except psycopg.OperationalError:  # the commit's answer was lost: in doubt
                    self.in_doubt.append((batch, ids, routes, time.time()))
                    conn = None
                    continue
                now = time.time()
                self.events += [Event(i, e.key, r, 0, now, tenant=e.tenant)
                                for i, e, r in zip(ids, batch, routes, strict=True)]
            except psycopg.OperationalError:
                conn = None  # never committed: nothing to record
                time.sleep(0.2)
        if conn is not None:
            conn.close()

    def settle(self) -> None:
        """Events whose commit went unanswered: committed exactly when they are in the table."""
        with psycopg.connect(self.dsn) as conn:
            for batch, ids, routes, at in self.in_doubt:
                found = {str(r[0]) for r in conn.execute(
                    "SELECT id FROM outbox.events WHERE id = ANY (%s::uuid[])", (ids,))}
                for event_id, event, route in zip(ids, batch, routes, strict=True):
                    self.events.append(Event(event_id, event.key, route, 0, at,
                                             rolled_back=event_id not in found,
                                             tenant=event.tenant))


def _seqs(dsn: str, events: list[Event]) -> list[Event]:
    """The events with their publish order read back from the table."""
    with psycopg.connect(dsn) as conn:
        seq = {str(i): int(s) for i, s in conn.execute("SELECT id, seq FROM outbox.events")}
    return [Event(e.id, e.key, e.endpoints, seq.get(e.id, 0), e.committed_at, e.rolled_back,
                  e.tenant)
            for e in events]


def _drained(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM outbox.deliveries "
                           "WHERE state IN ('pending', 'in_flight')").fetchone()
    return row is not None and row[0] == 0


def _setup(dsn: str, url: str, customers: int) -> None:
    """The schema and the endpoints, through the same API ``outbox endpoints add`` uses."""
    common: dict[str, Any] = {"timeout": TIMEOUT, "min_backoff": 0.2, "max_backoff": 2.0,
                              "max_attempts": 100, "breaker_failures": 10,
                              "breaker_cooldown": 5.0}
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        add_endpoint(conn, EndpointSpec("orders", url + "orders", ("order.*",),
                                        max_in_flight=LIMITS["orders"].max_in_flight, **common))
        add_endpoint(conn, EndpointSpec("audit", url + "audit", ("order.audited",),
                                        max_in_flight=LIMITS["audit"].max_in_flight,
                                        rate_limit=LIMITS["audit"].rate_limit, **common))
        add_endpoint(conn, EndpointSpec("shared", url + "shared", ("tenant.*",),
                                        max_in_flight=LIMITS["shared"].max_in_flight,
                                        **common))
        for i in range(customers):
            add_endpoint(conn, EndpointSpec(f"c{i}", f"{url}c{i}", (f"customer.{i}",),
                                            max_in_flight=CUSTOMER.max_in_flight, **common))
        conn.commit()


class Watcher:
    """Samples the database every second for deliveries left unclaimed beside idle capacity.

    A delivery counts as starved when sample after sample, for longer than
    UNCLAIMED seconds, it was due and claimable (endpoint enabled, circuit
    closed, not behind its key) while its endpoint had a free slot and at
    most half its --max-in-flight in flight: capacity idle, work waiting.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.quiet_until = 0.0  # time.monotonic(): no sampling before (a restart's wake)
        self.starved: set[int] = set()
        self.longest = 0.0
        self.seen: list[str] = []  # the first samples that found some, for the report
        self.began = time.monotonic()
        self.stopping = threading.Event()
        self._since: dict[int, float] = {}  # delivery id -> first sample it waited in

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self.stopping.wait(1.0):
            if time.monotonic() < self.quiet_until:
                self._since.clear()
                continue
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=3, autocommit=True)
                rows = conn.execute(STARVED, (POLL,)).fetchall()
            except psycopg.OperationalError:
                conn = None
                self._since.clear()
                continue
            self._judge(rows, time.monotonic())
        if conn is not None:
            conn.close()

    def _judge(self, rows: list[tuple[Any, ...]], now: float) -> None:
        since = {row[1]: self._since.get(row[1], now) for row in rows}
        self._since = since
        late = [(row, now - since[row[1]]) for row in rows if now - since[row[1]] > UNCLAIMED]
        for row, waited in late:
            self.starved.add(row[1])
            self.longest = max(self.longest, waited)
        if late and len(self.seen) < 20:
            self.seen.append(f"{now - self.began:.0f}s: " + ", ".join(
                f"{r[0]} #{r[1]} key {r[2]} attempts {r[3]} for {w:.1f}s" for r, w in late[:5]))


def run(minutes: float, rate: float, seed: int, customers: int = 0) -> Report:
    rng = random.Random(seed)
    report = Report()
    journal = Journal(random.Random(seed + 1))
    logs = Path(tempfile.mkdtemp(prefix="outbox-soak-"))
    seconds = minutes * 60
    with (TemporaryPostgres(fsync=True, tmpfs=False) as pg,
          Receiver(journal, record=False) as rx):
        _setup(pg.dsn, rx.url, customers)
        limits = {**LIMITS, **{f"c{i}": CUSTOMER for i in range(customers)}}
        fleet = Fleet(pg.dsn, logs)
        for index in range(DISPATCHERS):
            fleet.start(index)
        producers = Producers(pg.dsn, rate, random.Random(seed + 2), customers)
        noise = Producers(pg.dsn, NOISY_RATE, random.Random(seed + 3), noisy=True)
        producing = threading.Thread(target=producers.run)
        producing.start()
        noisy = threading.Thread(target=noise.run)
        noisy.start()
        watcher = Watcher(pg.dsn)
        watching = threading.Thread(target=watcher.run)
        watching.start()
        began, began_at = time.monotonic(), time.time()
        marks: list[tuple[float, str]] = []
        events = [(0.25, "restart"), (0.40, "outage"), (0.40 + 30 / seconds, "recover"),
                  (0.65, "restart")]
        next_kill = began + rng.uniform(10, 20)
        try:
            while (elapsed := time.monotonic() - began) < seconds:
                while events and elapsed >= events[0][0] * seconds:
                    _, what = events.pop(0)
                    print(f"{elapsed:7.1f}s {what}", flush=True)
                    marks.append((time.time(), what))
                    if what == "restart":
                        watcher.quiet_until = float("inf")
                        pg.stop("immediate")
                        time.sleep(rng.uniform(2, 5))
                        pg.start()
                        # reconnect backoff (5 s at most) and a lease to expire
                        watcher.quiet_until = time.monotonic() + 15
                        report.pg_restarts += 1
                    else:
                        journal.outage = what == "outage"
                if time.monotonic() >= next_kill:
                    fleet.kill_one(rng)
                    marks.append((time.time(), "kill"))
                    print(f"{time.monotonic() - began:7.1f}s kill", flush=True)
                    next_kill = time.monotonic() + rng.uniform(10, 20)
                time.sleep(0.2)
        finally:
            producers.stopping.set()
            noise.stopping.set()
            producing.join()
            noisy.join()
        print(f"{time.monotonic() - began:7.1f}s producing stopped, draining", flush=True)
        stopped = time.monotonic()
        while not _drained(pg.dsn) and time.monotonic() < stopped + 600:
            time.sleep(0.5)
        drained = time.monotonic() - stopped
        watcher.stopping.set()
        watching.join()
        report.starved, report.max_unclaimed_seconds = len(watcher.starved), watcher.longest
        report.notes += [f"unclaimed at {line}" for line in watcher.seen]
        time.sleep(2)
        fleet.stop()
        producers.settle()
        noise.settle()
        published = _seqs(pg.dsn, producers.events + noise.events)
        log = fleet.log_text()
        report.kills = fleet.kills
        report.breaker_opens = len(re.findall(r"circuit of endpoint \S+: \S+ -> open", log))
        rescued = sum(int(n) for n in re.findall(r"(\d+) deliveries had expired leases", log))
        late = sum(1 for a in journal.arrivals if 200 <= a.status < 300
                   and a.end - a.start >= TIMEOUT - 0.1)
        report.duplicates_allowed = rescued + late
        check(journal.arrivals, published, limits, report)
        (logs / "journal.json").write_text(json.dumps(
            {"began": began_at, "marks": marks, "arrivals": [astuple(a) for a in journal.arrivals],
             "events": [astuple(e) for e in published]}))
        answered = sum(1 for a in journal.arrivals if 200 <= a.status < 300)
        report.notes.append(
            f"{len(journal.arrivals):,} requests ({answered:,} answered 2xx); "
            f"{len(producers.in_doubt) + len(noise.in_doubt)} transactions in "
            f"doubt (commit unanswered); {sum(e.rolled_back for e in published):,} events "
            f"rolled back; drained {drained:.1f} s after producing stopped; {rescued} "
            f"deliveries rescued from dead dispatchers; logs in {logs}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=180.0, help="events published per second")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--endpoints", type=int, default=0,
                        help="customer endpoints beside the two (the many-endpoints mode)")
    args = parser.parse_args(argv)
    print(f"soak: {args.minutes:g} min at {args.rate:g} events/s, seed {args.seed}, "
          f"{args.endpoints} customer endpoints, {os.cpu_count()} cores", flush=True)
    report = run(args.minutes, args.rate, args.seed, args.endpoints)
    for note in report.notes:
        print(note)
    print(json.dumps(report.summary()))
    return 0 if report.ok() else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
