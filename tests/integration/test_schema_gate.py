"""The dispatcher's schema gate logs a schema problem at once, then at most every 30 s."""

from __future__ import annotations

import asyncio
import itertools
import logging

import psycopg
import pytest

from dispatcher.db import Database, Health
from dispatcher.schema_gate import GateVerdict, SchemaGate
from outbox.migrate import SCHEMA_VERSION, migrate
from tests.support.releases import previous


def test_problem_logged_at_most_every_30_seconds(empty_dsn: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Checks 5 s apart for 300 s on an older schema log 11 errors (0, 30 ... 300 s), not 61."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(previous().schema_sql().encode())
    clock = itertools.count(0, 5.0)
    health = Health()

    async def run() -> GateVerdict:
        stopping, checks = asyncio.Event(), itertools.count(1)

        def beat() -> None:
            if next(checks) > 60:
                stopping.set()

        database = Database(empty_dsn, health, "test")
        gate = SchemaGate(database, health, needed=SCHEMA_VERSION,
                          clock=lambda: float(next(clock)))
        try:
            return await gate.wait(stopping, once=False, interval=0.001, beat=beat)
        finally:
            await database.close()

    with caplog.at_level(logging.ERROR, logger="dispatcher.schema"):
        assert asyncio.run(run()) is GateVerdict.STOPPED
    assert len(caplog.records) == 11
    assert not health.ready


def test_current_schema_opens_the_gate(empty_dsn: str) -> None:
    """On a current schema the gate opens at its first check and /readyz may say ready."""
    with psycopg.connect(empty_dsn) as conn:
        migrate(conn)
    health = Health()

    async def run() -> GateVerdict:
        database = Database(empty_dsn, health, "test")
        try:
            return await SchemaGate(database, health, needed=SCHEMA_VERSION).wait(
                asyncio.Event(), once=True, interval=0.01, beat=lambda: None)
        finally:
            await database.close()

    assert asyncio.run(run()) is GateVerdict.READY
    assert health.ready
