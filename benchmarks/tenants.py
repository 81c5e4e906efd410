"""Fair turns between tenants: a quiet tenant beside a noisy one's backlog, and the claim's cost
with many tenants.

    python benchmarks/tenants.py [--backlogs 50000,1000000] [--seconds 20] [--rounds 3]
                                 [--tenants 10000] [--baseline DIR]

One throwaway PostgreSQL (fsync on) and one local receiver answering every request after
10 ms. One endpoint, ``--max-in-flight 16``. Per backlog size and round:

* **alone**: tenant A's backlog, nothing else: A's events/s over ``--seconds`` from its
  first arrival, and the dispatcher's CPU per event;
* **shared**: the same backlog while tenant B publishes one event every 100 ms: B's
  commit-to-arrival p50 and p99, and A's events/s against the alone run of the same round
  (the endpoint stays busy). In publish order B's events would wait behind what is left of
  A's backlog: ``backlog / A's rate`` seconds, printed beside them.

The backlog is published once per size into a template database; each run starts on a copy
of it, so that the runs of a round differ only in what they measure. With ``--baseline DIR``
the shared run is repeated with DIR's dispatcher (another checkout) in each round.

Then the claim statement's cost (median of 15 claims, each rolled back): one endpoint whose
only due work is one tenant's 300 deliveries, against the same endpoint with ``--tenants``
tenants having due work (three deliveries each) beside one with the largest backlog: the
walk of a claim looks at as many tenants as it has turns, however many there are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import psycopg
import throughput  # the CPU reader and dispatcher start/stop
from psycopg import sql

import outbox
from dispatcher.limits.quota import HELD_BYTES
from dispatcher.limits.ring import RING_STEPS
from outbox.migrate import migrate
from outbox.sql import queries
from outbox.testing import Receiver, Request, Response, TemporaryPostgres

MAX_IN_FLIGHT = 16
ANSWER = 0.01  # the receiver's delay, seconds
QUIET_EVERY = 0.1  # B publishes one event this often


class Arrivals:
    """Per tenant, when each event arrived (perf_counter), answering after ANSWER seconds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.a_times: list[float] = []
        self.b_times: dict[int, float] = {}

    def __call__(self, request: Request) -> Response:
        now = time.perf_counter()
        body = json.loads(request.body)
        with self.lock:
            if body.get("tenant") == "b":
                self.b_times[body["data"]["n"]] = now
            else:
                self.a_times.append(now)
        return Response(204, delay=ANSWER)

    def reset(self) -> None:
        with self.lock:
            self.a_times = []
            self.b_times = {}


def recreate(admin_dsn: str, name: str, template: str | None = None) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template))
        admin.execute(create)
    return psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)


def template(admin_dsn: str, url: str, backlog: int) -> str:
    """A database holding the endpoint and tenant A's backlog; its name."""
    name = f"tenants_{backlog}"
    dsn = recreate(admin_dsn, name)
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) VALUES "
                     "('shared', %s, %s)", (url, MAX_IN_FLIGHT))
        conn.commit()
        for start in range(0, backlog, 5000):
            outbox.publish_many(conn, [outbox.Event("bulk", {"n": n}, tenant="a")
                                       for n in range(start, min(backlog, start + 5000))])
            conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # as autovacuum would have left it
    return name


def run(admin_dsn: str, name: str, arrivals: Arrivals, seconds: float, quiet: bool,
        tree: str | None) -> dict[str, Any]:
    """One drain of a copy of ``name`` for ``seconds`` from A's first arrival."""
    dsn = recreate(admin_dsn, "tenants_run", name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    arrivals.reset()
    proc = throughput.start_dispatcher(dsn, tree=tree)
    committed: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 120
        while not arrivals.a_times:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the dispatcher delivered nothing")
            time.sleep(0.005)
        cpu_at = throughput.cpu_seconds(proc.pid)
        began = arrivals.a_times[0]
        with psycopg.connect(dsn, autocommit=True) as conn:
            n = 0
            while time.perf_counter() < began + seconds:
                if quiet:
                    outbox.publish(conn, "quiet", {"n": n}, tenant="b")
                    committed[n] = time.perf_counter()
                    n += 1
                time.sleep(QUIET_EVERY)
        time.sleep(1.0)  # B's last events, on their way
        cpu = throughput.cpu_seconds(proc.pid) - cpu_at
    finally:
        throughput.stop(proc)
    with arrivals.lock:
        a_in = [at for at in arrivals.a_times if at <= began + seconds]
        waits = [arrivals.b_times[n] - at for n, at in committed.items()
                 if n in arrivals.b_times]
        lost = len(committed) - len(waits)
    result: dict[str, Any] = {"a_rate": (len(a_in) - 1) / (a_in[-1] - began),
                              "cpu_ms": 1000 * cpu / max(1, len(arrivals.a_times)
                                                         + len(arrivals.b_times))}
    if quiet:  # B's events still on their way when the run ended count as never arrived
        waits = sorted(waits) + [float("inf")] * lost
        result |= {"b_p50": statistics.median(waits),
                   "b_p99": waits[min(len(waits) - 1, round(0.99 * (len(waits) - 1)))],
                   "b_max": waits[-1], "b_events": len(waits) - lost, "b_late": lost}
    return result


CLAIM = {"requests": [MAX_IN_FLIGHT], "held": [MAX_IN_FLIGHT], "prefetch": [MAX_IN_FLIGHT],
         "rows": [2 * MAX_IN_FLIGHT], "floors": ["-infinity"], "ring_after": [None],
         "ring_null": [False], "ring_steps": RING_STEPS, "lease_seconds": 30, "horizon": 0.25,
         "pace": 1.05, "budget": HELD_BYTES}


def claim_ms(dsn: str, runs: int = 15) -> tuple[float, int]:
    """Median ms of one claim (rolled back) of endpoint 1; the tenants it served."""
    times, served = [], 0
    with psycopg.connect(dsn) as conn:
        for _ in range(runs):
            began = time.perf_counter()
            with conn.transaction(force_rollback=True):
                rows = conn.execute(queries["claim"], {**CLAIM, "endpoint_ids": [1]}).fetchall()
            times.append((time.perf_counter() - began) * 1000)
            served = len({row[-1] for row in rows})
            assert len(rows) == 2 * MAX_IN_FLIGHT, len(rows)
    return statistics.median(times), served


def claim_costs(admin_dsn: str, tenants: int, largest: int) -> dict[str, float]:
    """One tenant with 300 due, against ``tenants`` with 3 each beside one with ``largest``."""
    found: dict[str, float] = {}
    for label, counts in (("one tenant, 300 due", {"solo": 300}),
                          (f"{tenants:,} tenants + one of {largest:,}",
                           {"big": largest} | {f"t{n:05}": 3 for n in range(tenants)})):
        dsn = recreate(admin_dsn, "tenants_claim")
        with psycopg.connect(dsn) as conn:
            migrate(conn)
            conn.execute("INSERT INTO outbox.endpoints (name, url, max_in_flight) VALUES "
                         "('shared', 'http://127.0.0.1:9/', 1000)")
            conn.commit()
            batch: list[outbox.Event] = []
            for tenant, count in counts.items():
                batch += [outbox.Event("t", {"n": n}, tenant=tenant) for n in range(count)]
                if len(batch) >= 5000:
                    outbox.publish_many(conn, batch)
                    conn.commit()
                    batch = []
            if batch:
                outbox.publish_many(conn, batch)
                conn.commit()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        ms, served = claim_ms(dsn)
        found[label] = ms
        print(f"  claim, {label}: {ms:.2f} ms (served {served} tenants)", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="50000,1000000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--claim-largest", type=int, default=1_000_000)
    parser.add_argument("--baseline", metavar="DIR")
    args = parser.parse_args()
    arrivals = Arrivals()
    with TemporaryPostgres() as pg, Receiver(arrivals, record=False) as receiver:
        for backlog in [int(b) for b in args.backlogs.split(",")]:
            began = time.monotonic()
            name = template(pg.dsn, receiver.url, backlog)
            print(f"backlog {backlog:,}: template made in {time.monotonic() - began:.0f} s",
                  flush=True)
            rounds: list[dict[str, dict[str, Any]]] = []
            for round_ in range(args.rounds):
                found = {"alone": run(pg.dsn, name, arrivals, args.seconds, False, None),
                         "shared": run(pg.dsn, name, arrivals, args.seconds, True, None)}
                if args.baseline:
                    found["baseline"] = run(pg.dsn, name, arrivals, args.seconds, True,
                                            args.baseline)
                rounds.append(found)
                alone = found["alone"]["a_rate"]
                for label, got in found.items():
                    extra = "".join(f", B p50 {got['b_p50'] * 1000:.0f} ms p99 "
                                    f"{got['b_p99'] * 1000:.0f} ms max {got['b_max'] * 1000:.0f}"
                                    f" ms ({got['b_events']} events, {got['b_late']} late)"
                                    for _ in [0] if "b_p50" in got)
                    print(f"  round {round_ + 1} {label}: A {got['a_rate']:,.0f} ev/s "
                          f"({got['a_rate'] / alone:.2f} of alone), "
                          f"{got['cpu_ms']:.3f} ms CPU/event{extra}", flush=True)
            for label in rounds[0]:
                def med(field: str, label: str = label,
                        rounds: list[dict[str, dict[str, Any]]] = rounds) -> float:
                    return float(statistics.median(r[label][field] for r in rounds))
                ratio = statistics.median(r[label]["a_rate"] / r["alone"]["a_rate"]
                                          for r in rounds)
                line = (f"median {label}: A {med('a_rate'):,.0f} ev/s ({ratio:.2f} of alone), "
                        f"CPU {med('cpu_ms'):.3f} ms/event")
                if "b_p50" in rounds[0][label]:
                    line += (f", B p50 {med('b_p50') * 1000:.0f} ms, "
                             f"p99 {med('b_p99') * 1000:.0f} ms")
                print(line, flush=True)
            rate = statistics.median(r["alone"]["a_rate"] for r in rounds)
            print(f"in publish order B would wait about {backlog / rate:,.0f} s", flush=True)
        print("claim statement:", flush=True)
        costs = claim_costs(pg.dsn, args.tenants, args.claim_largest)
        small, large = costs.values()
        print(f"claim with many tenants / one tenant: {large / small:.2f}x", flush=True)


if __name__ == "__main__":
    main()
