"""Batches of large events: each request stays within the byte budget, memory within a bound."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import outbox
from dispatcher.limits.quota import BATCH_BYTES
from outbox.testing import Receiver
from tests.support.dispatcher import Dispatcher, add_endpoint, states, wait_until

pytestmark = pytest.mark.slow
MiB = 1024 * 1024


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _drain_large(dsn: str, conn: psycopg.Connection[Any], receiver: Receiver, count: int,
                 **options: Any) -> float:
    """Publish ``count`` events of 1 MiB, let a dispatcher deliver them all; its peak in MiB.

    Checks on the way that every event came once, in requests of at most
    BATCH_BYTES of payloads.
    """
    add_endpoint(conn, "big", receiver.url, **options)
    blob = "x" * (MiB - 100)
    for n in range(count):
        outbox.publish(conn, "t", {"n": n, "blob": blob})
    conn.commit()
    with Dispatcher(dsn) as dispatcher:
        wait_until(lambda: states(conn).get("delivered") == count, timeout=120,
                   dispatcher=dispatcher, what=f"{count} large events to be delivered")
        assert dispatcher.process is not None
        peak = peak_rss_mib(dispatcher.process.pid)
    bodies = [json.loads(r.body) for r in receiver.snapshot()]
    assert max(len(r.body) for r in receiver.snapshot()) <= BATCH_BYTES + 64 * 1024
    assert sorted(e["data"]["n"] for body in bodies for e in body) == list(range(count))
    return peak


def test_a_batch_of_sixty_one_mib_events_is_split_and_held_in_bounded_memory(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """--max-batch 60 over 60 events of 1 MiB: requests of at most 4 MiB of payloads, every
    event delivered once, and the dispatcher's peak memory under 250 MiB (it was 340)."""
    peak = _drain_large(dsn, conn, receiver, 60, max_batch=60, max_in_flight=1)
    assert peak < 250, f"peak resident memory {peak:.0f} MiB"


def test_a_backlog_of_three_hundred_one_mib_events_is_drained_in_bounded_memory(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """The dispatcher's default options over 300 events of 1 MiB for an endpoint taking
    batches of 100: every event delivered once, in requests of at most 4 MiB of payloads,
    and the dispatcher's peak memory under the manifests' 256 MiB (it was 650: one claim
    took all 300)."""
    peak = _drain_large(dsn, conn, receiver, 300, max_batch=100)
    assert peak < 256, f"peak resident memory {peak:.0f} MiB"


def test_a_batch_is_split_by_its_payloads_bytes_not_their_characters(
        dsn: str, conn: psycopg.Connection[Any], receiver: Receiver) -> None:
    """Eight events of 300 Ki two-byte characters (600 KiB each, 2.4 Mi characters in all)
    for --max-batch 10: no request carries more than 4 MiB of payloads."""
    add_endpoint(conn, "accents", receiver.url, max_batch=10, max_in_flight=1)
    blob = "é" * (300 * 1024)
    for n in range(8):
        outbox.publish(conn, "t", {"n": n, "blob": blob})
    conn.commit()
    with Dispatcher(dsn) as dispatcher:
        wait_until(lambda: states(conn).get("delivered") == 8, timeout=60,
                   dispatcher=dispatcher, what="8 events to be delivered")
    requests = receiver.snapshot()
    assert sorted(e["data"]["n"] for r in requests for e in json.loads(r.body)) == list(range(8))
    assert max(len(r.body) for r in requests) <= BATCH_BYTES + 64 * 1024
