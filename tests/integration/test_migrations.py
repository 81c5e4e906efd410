"""Numbered steps: exactly the missing ones, each in its transaction, never a lock too long."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

import outbox
from outbox.migrate import SCHEMA_VERSION, MigrationBlocked, migrate, plan, read_state
from outbox.sql import Step, steps
from tests.support.catalogue import catalogue, differences
from tests.support.publishing import add_endpoint, committed
from tests.support.releases import Release, releases

OUTBOX_TABLES = ("deliveries", "endpoint_backlog", "endpoint_slots", "endpoint_state",
                 "endpoints", "events", "inbox", "maintainer")


def _made_by(release: Release, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(release.schema_sql().encode())


def _versions(dsn: str) -> list[int]:
    return [r[0] for r in committed(dsn, "SELECT version FROM outbox.schema_version ORDER BY 1")]


@pytest.mark.parametrize("release", releases(), ids=str)
def test_upgraded_equals_fresh(release: Release, empty_dsn: str, dsn: str) -> None:
    """A database of every earlier release, upgraded, has the whole catalogue of a fresh one."""
    _made_by(release, empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        assert migrate(conn) == (release.version, SCHEMA_VERSION)
    assert differences(catalogue(empty_dsn), catalogue(dsn)) == []


@pytest.mark.parametrize("release", releases(), ids=str)
def test_only_the_missing_steps_run(release: Release, empty_dsn: str) -> None:
    """An existing database gets exactly the steps after its version, in order, each recorded."""
    _made_by(release, empty_dsn)
    done: list[str] = []
    with psycopg.connect(empty_dsn) as conn:
        migrate(conn, on_step=done.append)
    wanted = [s for s in steps() if s.version > release.version]
    assert [line.split(":")[0] for line in done] == [s.name for s in wanted]
    assert _versions(empty_dsn) == [release.version, *(s.version for s in wanted)]


def test_current_database_reads_only_the_version_table(dsn: str) -> None:
    """Checking a current database locks no outbox table but a read of schema_version."""
    with psycopg.connect(dsn) as conn:
        todo = plan(read_state(conn))
        locks = conn.execute(
            "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE l.pid = pg_backend_pid() AND n.nspname = 'outbox'").fetchall()
    assert not todo.pending
    assert {mode for _, mode in locks} == {"AccessShareLock"}
    assert {relation for relation, _ in locks} <= {"schema_version", "schema_version_pkey"}


def test_noop_migrate_beside_every_table_locked(dsn: str) -> None:
    """A no-op migrate finishes while another transaction holds every outbox table exclusively."""
    with psycopg.connect(dsn) as holder:
        for table in OUTBOX_TABLES:
            holder.execute(f"LOCK TABLE outbox.{table} IN ACCESS EXCLUSIVE MODE")
        with psycopg.connect(dsn) as conn:
            started = time.monotonic()
            assert migrate(conn, lock_timeout=0.05, attempts=1) == (SCHEMA_VERSION,) * 2
            assert time.monotonic() - started < 1.0
        holder.rollback()


def test_noop_migrate_beside_a_long_transaction_blocks_no_publisher(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """The issue's case: a slow transaction that published, a no-op migrate, a new publish."""
    add_endpoint(conn, "all")
    conn.commit()
    outbox.publish(conn, "slow.request", {"n": 1})  # left open
    with psycopg.connect(dsn) as migrator:
        migrate(migrator)
    with psycopg.connect(dsn) as other:
        other.execute("SET lock_timeout = '1s'")
        started = time.monotonic()
        outbox.publish(other, "fast.request", {"n": 2})
        other.commit()
    assert time.monotonic() - started < 1.0
    conn.rollback()


def _extra_step(version: int, sql: str, *markers: str) -> Step:
    header = "".join(f"-- step: {m}\n" for m in markers)
    return Step(version, f"{version:04d}_test_step", header + sql, inbox="inbox" in markers,
                transactional="no-transaction" not in markers)


def test_blocked_step_gives_up_and_a_rerun_goes_on(empty_dsn: str) -> None:
    """A step behind a long transaction raises; the earlier steps stay, a rerun applies the rest."""
    _made_by(releases()[-1], empty_dsn)
    extra = _extra_step(SCHEMA_VERSION + 1, "ALTER TABLE outbox.events ADD COLUMN probe text;")
    available = [*steps(), extra]
    released = releases()[-1].version
    applied = [released, *(step.version for step in steps() if step.version > released)]
    with psycopg.connect(empty_dsn) as reader, psycopg.connect(empty_dsn) as conn:
        migrate(conn)  # this release's own steps lock the events table too: before the reader
        reader.execute("SELECT count(*) FROM outbox.events")  # ACCESS SHARE until rollback
        started = time.monotonic()
        with pytest.raises(MigrationBlocked,
                           match=rf"{extra.name}.*run `outbox migrate` again"):
            migrate(conn, lock_timeout=0.1, attempts=3, available=available)
        assert time.monotonic() - started < 3.0
        assert _versions(empty_dsn) == applied
        assert committed(empty_dsn, "SELECT count(*) FROM information_schema.columns "
                         "WHERE table_name = 'events' AND column_name = 'probe'") == [(0,)]
        reader.rollback()
        assert migrate(conn, available=available) == (SCHEMA_VERSION, SCHEMA_VERSION + 1)


def test_waiting_step_holds_publishers_back_only_briefly(empty_dsn: str) -> None:
    """While a step waits behind a long transaction, publish() is never held back over 1 s."""
    _made_by(releases()[-1], empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        migrate(conn)
        add_endpoint(conn, "all")
        conn.commit()
    extra = _extra_step(SCHEMA_VERSION + 1, "ALTER TABLE outbox.events ADD COLUMN probe text;")
    slowest = 0.0
    with psycopg.connect(empty_dsn) as reader:
        reader.execute("SELECT count(*) FROM outbox.events")
        failure: list[BaseException] = []

        def run() -> None:
            with psycopg.connect(empty_dsn) as conn:
                try:
                    migrate(conn, available=[*steps(), extra])
                except MigrationBlocked as exc:
                    failure.append(exc)

        migrator = threading.Thread(target=run)
        migrator.start()
        with psycopg.connect(empty_dsn, autocommit=True) as publisher:
            while migrator.is_alive():
                started = time.monotonic()
                outbox.publish(publisher, "during.migrate", {})
                slowest = max(slowest, time.monotonic() - started)
        migrator.join()
        reader.rollback()
    assert failure, "the step should have given up"
    assert slowest < 1.0


def test_concurrent_migrators(empty_dsn: str, dsn: str) -> None:
    """Several migrators started at once on an old database apply each step once, all succeed."""
    _made_by(releases()[0], empty_dsn)
    results: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(empty_dsn) as conn:
                results.append(migrate(conn))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert {after for _, after in results} == {SCHEMA_VERSION}
    assert _versions(empty_dsn) == [1, *(s.version for s in steps())]
    assert differences(catalogue(empty_dsn), catalogue(dsn)) == []


def test_concurrent_migrators_on_an_empty_database(empty_dsn: str) -> None:
    """Several migrators on an empty database: one creates the schema, the others find it."""
    results: list[tuple[int, int]] = []

    def run() -> None:
        with psycopg.connect(empty_dsn) as conn:
            results.append(migrate(conn))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Each ends current; whether a late starter saw the schema missing or already made
    # depends on scheduling, but it is made once, by one of them.
    assert [after for _, after in results] == [SCHEMA_VERSION] * 4
    assert {before for before, _ in results} <= {0, SCHEMA_VERSION}
    assert (0, SCHEMA_VERSION) in results
    assert _versions(empty_dsn) == [SCHEMA_VERSION]


def test_step_outside_a_transaction(dsn: str) -> None:
    """A no-transaction step (CREATE INDEX CONCURRENTLY) runs statement by statement, recorded."""
    extra = _extra_step(SCHEMA_VERSION + 1,
                        "DROP INDEX CONCURRENTLY IF EXISTS outbox.events_type_probe;\n"
                        "CREATE INDEX CONCURRENTLY IF NOT EXISTS events_type_probe\n"
                        "    ON outbox.events (type);\n", "no-transaction")
    with psycopg.connect(dsn) as conn:
        assert migrate(conn, available=[*steps(), extra]) == (SCHEMA_VERSION,
                                                               SCHEMA_VERSION + 1)
        assert migrate(conn, available=[*steps(), extra]) == (SCHEMA_VERSION + 1,) * 2
    assert committed(dsn, "SELECT indisvalid FROM pg_index WHERE indexrelid = "
                     "'outbox.events_type_probe'::regclass") == [(True,)]


def test_inbox_only(empty_dsn: str, dsn: str) -> None:
    """--inbox-only makes the version table and the inbox alone, equal to a full database's."""
    inbox_version = max(step.version for step in steps() if step.inbox)
    with psycopg.connect(empty_dsn) as conn:
        assert migrate(conn, inbox_only=True) == (0, inbox_version)
        assert migrate(conn, inbox_only=True) == (inbox_version, inbox_version)
        state = read_state(conn)
    assert (state.outbox, state.inbox) == (False, True)
    tables = [r[0] for r in committed(
        empty_dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'outbox' ORDER BY 1")]
    assert tables == ["inbox", "schema_version"]
    full, alone = catalogue(dsn), catalogue(empty_dsn)
    for kind, rows in alone.items():
        if kind in ("schema",):
            continue
        assert rows == [r for r in full[kind] if any(name in repr(r[:2]) for name in (
            "'inbox", "'schema_version"))], kind


def test_full_migrate_after_inbox_only(empty_dsn: str, dsn: str) -> None:
    """A receiver's inbox-only database later migrated in full equals a fresh one."""
    with psycopg.connect(empty_dsn) as conn:
        migrate(conn, inbox_only=True)
        assert migrate(conn) == (0, SCHEMA_VERSION)
    assert differences(catalogue(empty_dsn), catalogue(dsn)) == []


def test_a_held_migrators_lock_is_waited_for_with_a_deadline(empty_dsn: str) -> None:
    """Any role may take the migrators' advisory lock: migrate gives up in time, naming its pid."""
    with psycopg.connect(empty_dsn, autocommit=True) as squatter, \
            psycopg.connect(empty_dsn) as conn:
        squatter.execute("SELECT pg_advisory_lock(7469813520411)")
        pid = squatter.info.backend_pid
        started = time.monotonic()
        with pytest.raises(MigrationBlocked, match=f"pid {pid}"):
            migrate(conn, turn_wait=0.5)
        assert time.monotonic() - started < 10
        assert not read_state(conn).outbox  # nothing was made
        conn.rollback()
        squatter.execute("SELECT pg_advisory_unlock(7469813520411)")
        assert migrate(conn, turn_wait=0.5)[1] == SCHEMA_VERSION


def test_no_step_deadlocks_a_publisher_between_its_tables(empty_dsn: str) -> None:
    """Each step, applied to a database of the oldest release, beside a transaction that
    holds what a publisher's statement holds first (endpoints, read to route) and then asks
    for what it writes (events, deliveries): the publisher is never left waiting for a table
    the step took while the step waits for endpoints. (Locked in another order, the two wait
    for each other until the lock timeout ends one.)"""
    oldest = releases()[0]
    _made_by(oldest, empty_dsn)
    for step in (s for s in steps() if s.version > oldest.version and s.transactional):
        with psycopg.connect(empty_dsn) as publisher, psycopg.connect(empty_dsn) as conn:
            publisher.execute("LOCK TABLE outbox.endpoints IN ACCESS SHARE MODE")
            failed: list[BaseException] = []

            def apply(step: Step = step, conn: psycopg.Connection[Any] = conn,
                      failed: list[BaseException] = failed) -> None:
                try:
                    migrate(conn, available=[s for s in steps() if s.version <= step.version])
                except BaseException as exc:  # reported below
                    failed.append(exc)

            migrating = threading.Thread(target=apply)
            migrating.start()
            time.sleep(0.2)  # the step is waiting now, or done with tables we do not hold
            began = time.monotonic()
            publisher.execute("LOCK TABLE outbox.events, outbox.deliveries "
                              "IN ROW EXCLUSIVE MODE")
            waited = time.monotonic() - began
            publisher.commit()
            migrating.join(timeout=60)
            assert not failed, (step.name, failed)
            # Deadlocked, the publisher would wait for the step's lock timeout (0.5 s) to
            # end the step's try; the step retries and goes through, so only the wait shows.
            assert waited < 0.25, (step.name, waited)
        assert _versions(empty_dsn)[-1] == step.version
