"""What the attempt history costs the statement that records results (``complete``).

    python benchmarks/history.py [--deliveries 20000] [--batch 1000] [--rounds 5]
                                 [--baseline-sql PATH]

One throwaway PostgreSQL (fsync on). Deliveries are put in flight, then
their results recorded by the ``complete`` statement in batches, timed on
the client around each statement (its commit included), in four variants
interleaved round by round, each taking every place in the order in turn:

* ``success``: every result a success (no history row);
* ``success-before``: the same with the ``complete`` statement of another
  tree (``--baseline-sql``: its ``outbox/sql/queries/dispatch.sql``, main's
  copy say), which knows nothing of the history: what the history's CTE
  costs when nothing fails;
* ``failure``: every result a retryable failure, each writing its history row;
* ``failure-no-history``: the same failures without a reason, so that no row
  is written: the difference is the cost of a history row.

Prints the median microseconds per result of each; the figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any, Literal

import psycopg

from dispatcher.policy.model import FailureReason, Record
from outbox.migrate import migrate
from outbox.sql import queries
from outbox.testing import TemporaryPostgres

SETUP = (
    "INSERT INTO outbox.endpoints (name, url) VALUES ('bench', 'http://127.0.0.1:9/')",
    "INSERT INTO outbox.events (id, type, payload) "
    "SELECT gen_random_uuid(), 'bench.event', '{}' FROM generate_series(1, %(n)s)",
    "INSERT INTO outbox.deliveries (event_id, endpoint_id, seq) "
    "SELECT ev.id, e.id, ev.seq FROM outbox.events ev, outbox.endpoints e",
)
IN_FLIGHT = """
UPDATE outbox.deliveries SET state = 'in_flight', attempts = 1, lease_token = gen_random_uuid(),
       lease_expires_at = now() + interval '1 hour', finished_at = NULL
RETURNING id, lease_token
"""


def baseline_complete(path: Path) -> str:
    text = path.read_text("utf-8")
    match = re.search(r"-- name: complete\n(.*?)(?=\n-- name: )", text, re.S)
    if match is None:
        raise SystemExit(f"{path}: no complete query")
    return match.group(1).strip()


def results(rows: list[tuple[Any, ...]], variant: str) -> list[list[object]]:
    state: Literal["delivered", "pending"] = ("delivered" if variant.startswith("success")
                                              else "pending")
    reason: FailureReason | None = "http_5xx" if variant == "failure" else None
    error = None if state == "delivered" else "HTTP 503: try later"
    status = 200 if state == "delivered" else 503
    return [Record(row[0], row[1], state, 1.0, error, status, False, reason, 0.004).as_row()
            for row in rows]


def run(conn: psycopg.Connection[Any], sql: str, variant: str, batch: int) -> float:
    """Microseconds per result of recording every in-flight delivery's result."""
    rows = conn.execute(IN_FLIGHT).fetchall()
    conn.execute("TRUNCATE outbox.attempts")
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM outbox.deliveries")
    conn.autocommit = False
    payload = results(rows, variant)
    started = time.perf_counter()
    for start in range(0, len(payload), batch):
        conn.execute(sql.encode(), {"results": json.dumps(payload[start:start + batch]),
                                    "slots": "[]", "circuits": "[]"})
        conn.commit()
    return (time.perf_counter() - started) / len(payload) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-sql", type=Path, default=None,
                        help="another tree's outbox/sql/queries/dispatch.sql, for success-before")
    args = parser.parse_args()
    variants = {"success": queries["complete"], "failure": queries["complete"],
                "failure-no-history": queries["complete"]}
    if args.baseline_sql is not None:
        variants["success-before"] = baseline_complete(args.baseline_sql)
    timings: dict[str, list[float]] = {name: [] for name in variants}
    rows = 0
    with TemporaryPostgres(fsync=True, tmpfs=False) as pg, \
            psycopg.connect(pg.dsn, autocommit=False) as conn:
        migrate(conn)
        for statement in SETUP:
            conn.execute(statement, {"n": args.deliveries} if "%(n)s" in statement else None)
        conn.commit()
        for round_no in range(1, args.rounds + 1):
            names = list(variants)
            shift = round_no % len(names)  # each variant takes every place in turn
            for name in names[shift:] + names[:shift]:
                timings[name].append(run(conn, variants[name], name, args.batch))
                if name == "failure":
                    [[rows]] = conn.execute("SELECT count(*) FROM outbox.attempts").fetchall()
            print(f"round {round_no}: " + "   ".join(
                f"{name} {values[-1]:6.1f} us" for name, values in timings.items()), flush=True)
    print()
    for name, values in timings.items():
        print(f"{name:<20} median {statistics.median(values):7.1f} us per result")
    cost = (statistics.median(timings["failure"])
            - statistics.median(timings["failure-no-history"]))
    print(f"history row          {cost:7.1f} us per failed attempt "
          f"({rows} rows written in the last failure round)")


if __name__ == "__main__":
    main()
