"""The application side of ``outbox demo``: orders and their events, one transaction each.

Each transaction inserts a row into ``demo_orders`` and publishes its
``order.created`` event next to it, as an application would. One event in
:data:`KEYED_EVERY` carries its customer as the ordering key (about
:data:`PER_KEY` events per customer, each numbered ``n`` so that the
receiver can check the order). One extra transaction in
:data:`ROLLBACK_EVERY` is rolled back after publishing: its order and its
event vanish together, and the receiver is told their ids so that it can
prove none of them arrives. After the orders, one event the receiver
refuses (``receiver.REFUSED_TYPE``): the demo's dead letter.

It runs in a thread with its own connection so that the main thread stays
free to draw progress and to react to signals.
"""

from __future__ import annotations

import random
import threading
import time
from decimal import Decimal

import psycopg

import outbox
from outbox._shared.dsn import server_options
from outbox._shared.text import first_line
from outbox.demo.receiver import REFUSED_TYPE
from outbox.sql import queries

KEYED_EVERY = 5
PER_KEY = 10
ROLLBACK_EVERY = 50


class Publisher:
    """Publish ``total`` committed events (and a few rolled-back ones) in a thread."""

    def __init__(self, dsn: str, total: int, rolled_back: set[str]) -> None:
        self.dsn = dsn
        self.total = total
        self.rolled_back = rolled_back
        self.keyed = -(-total // KEYED_EVERY)
        self.keys = max(1, -(-self.keyed // PER_KEY))
        middle = ROLLBACK_EVERY // 2
        self._rollback_at = set(range(min(middle, total - 1), total, ROLLBACK_EVERY))
        self.rollbacks = len(self._rollback_at)
        self.committed = 0
        self.refused_id: str | None = None
        """The event the receiver refuses, published after the orders (not in ``total``)."""
        self.started_at = 0.0
        self.finished_at = 0.0
        self.done = False
        self.error: str | None = None
        self._stop = threading.Event()
        self._rng = random.Random()  # noqa: S311 - order amounts for a demo
        self._thread = threading.Thread(target=self._main, name="outbox-demo-publisher",
                                        daemon=True)

    def start(self) -> None:
        self.started_at = time.time()
        self._thread.start()

    def stop(self) -> None:
        """Stop after the transaction in progress; wait for it briefly."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _main(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True, options=server_options(self.dsn),
                                 application_name="outbox-demo-publisher") as conn:
                self._publish_all(conn)
        except Exception as exc:  # any failure: reported by the main thread
            if not self._stop.is_set():
                self.error = first_line(exc)
        finally:
            self.finished_at = time.time()
            self.done = True

    def _publish_all(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        counters = [0] * self.keys
        for i in range(self.total):
            if self._stop.is_set():
                return
            slot = (i // KEYED_EVERY) % self.keys
            if i in self._rollback_at:
                self._order(conn, f"customer-{slot:03d}", keyed=True, n=counters[slot] + 1,
                            rollback=True)
            if i % KEYED_EVERY == 0:
                counters[slot] += 1
                self._order(conn, f"customer-{slot:03d}", keyed=True, n=counters[slot])
            else:
                self._order(conn, f"guest-{i}", keyed=False, n=None)
            self.committed += 1
        if not self._stop.is_set():
            with conn.transaction():
                self.refused_id = str(outbox.publish(conn, REFUSED_TYPE, {
                    "order_id": 1, "reason": "a request the receiver will never take"}))

    def _order(self, conn: psycopg.Connection[tuple[object, ...]], customer: str, *,
               keyed: bool, n: int | None, rollback: bool = False) -> str:
        """Insert one order and publish its event in one transaction; returns the event id."""
        amount = Decimal(self._rng.randrange(500, 50_000)) / 100
        with conn.transaction():
            row = conn.execute(queries["demo_order_insert"],
                               {"customer": customer, "amount": amount}).fetchone()
            assert row is not None
            payload: dict[str, object] = {"order_id": row[0], "customer": customer,
                                          "amount": str(amount)}
            if n is not None:
                payload["n"] = n
            event_id = outbox.publish(conn, "order.created", payload,
                                      key=customer if keyed else None)
            if rollback:
                # Declined at the last moment: the order and its event go together.
                self.rolled_back.add(str(event_id))
                raise psycopg.Rollback
        return str(event_id)
