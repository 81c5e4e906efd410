"""The receiving side's cost: verifying a delivery, and recording it once.

    python benchmarks/receive.py [--verify-runs 20000] [--records 5000]

1. ``outbox.receive.Verifier.verify`` against the ``standardwebhooks``
   library's ``Webhook.verify`` on the same signed requests (one event, a 1 KB
   and a 64 KB body; both check the signature and parse the JSON body; ours
   also reads the envelope into ``Received``). Timed in turn, in one process.
2. ``receive.first_time`` inside an open transaction, for a new id and for an
   id already recorded, against the bare statement it runs (``INSERT ... ON
   CONFLICT DO NOTHING RETURNING`` through psycopg's ``conn.execute``) of the
   same rows, on a throwaway PostgreSQL. The transaction is rolled back at the
   end: the commit's flush costs the same either way and would drown the
   difference.

Each figure is the median of three runs, per call: wall time, and this
process's CPU time beside it.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from standardwebhooks.webhooks import Webhook

from outbox import receive
from outbox.migrate import migrate
from outbox.testing import TemporaryPostgres, signed_request

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BARE = ("INSERT INTO outbox.inbox (consumer, event_id) VALUES (%(consumer)s, %(event_id)s) "
        "ON CONFLICT DO NOTHING RETURNING true")


def timed(work: Callable[[], Any], calls: int) -> tuple[float, float]:
    """(wall, cpu) microseconds per call of ``calls`` calls of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        work()
    return ((time.perf_counter() - wall) / calls * 1e6,
            (time.process_time() - cpu) / calls * 1e6)


def median3(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def verify(calls: int) -> None:
    ours = receive.Verifier(SECRET, tolerance=receive.DEFAULT_TOLERANCE)
    theirs = Webhook(SECRET)
    print("verify one signed delivery           wall us/call  cpu us/call")
    for size in (1024, 64 * 1024):
        filler = "x" * (size - 150)
        request = signed_request(SECRET, "order.created", {"order_id": 7, "note": filler})
        body, headers = request.body, request.headers
        assert ours.verify(headers, body)[0].data["order_id"] == 7
        assert theirs.verify(body, headers)["data"]["order_id"] == 7
        n = calls if size <= 1024 else max(1, calls // 16)
        results: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": []}
        for _ in range(3):  # in turn, so that both see the same machine
            results["ours"].append(timed(functools.partial(ours.verify, headers, body), n))
            results["theirs"].append(timed(functools.partial(theirs.verify, body, headers), n))
        for name, label in (("ours", "outbox.receive.Verifier"),
                            ("theirs", "standardwebhooks.Webhook")):
            wall, cpu = median3(results[name])
            print(f"  {len(body) / 1024:5.0f} KB  {label:<25} {wall:10.1f}  {cpu:11.1f}")


def record(calls: int) -> None:
    print(f"record one event id, in a transaction   wall us/call  cpu us/call  ({calls} calls)")
    with TemporaryPostgres() as pg, psycopg.connect(pg.dsn) as conn:
        migrate(conn)
        results: dict[str, list[tuple[float, float]]] = {}

        def run(label: str, work: Callable[[str], Any], ids: list[str]) -> None:
            feed = iter(ids)
            with conn.transaction(force_rollback=True):
                if label.endswith("repeated id"):
                    work(ids[0])
                results.setdefault(label, []).append(timed(lambda: work(next(feed)), calls))

        for _ in range(3):
            fresh = [str(uuid.uuid4()) for _ in range(calls)]
            same = [fresh[0]] * calls
            run("first_time, new id", lambda i: receive.first_time(conn, i), fresh)
            run("bare INSERT, new id",
                lambda i: conn.execute(BARE, {"consumer": "default", "event_id": i}).fetchall(),
                fresh)
            run("first_time, repeated id", lambda i: receive.first_time(conn, i), same)
            run("bare INSERT, repeated id",
                lambda i: conn.execute(BARE, {"consumer": "default", "event_id": i}).fetchall(),
                same)
        for label, runs in results.items():
            wall, cpu = median3(runs)
            print(f"  {label:<30} {wall:12.1f}  {cpu:11.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verify-runs", type=int, default=20_000)
    parser.add_argument("--records", type=int, default=5_000)
    args = parser.parse_args()
    verify(args.verify_runs)
    record(args.records)


if __name__ == "__main__":
    main()
