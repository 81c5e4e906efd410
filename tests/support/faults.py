"""Faults to inject, for real: processes signalled, backends killed, the server crashed.

The catalogue (tests/acceptance/test_catalogue*.py) breaks a running fleet at
chosen moments and then checks that nothing committed was lost. What it needs
beside the dispatcher processes of ``tests.support.resilience``:

- ``frozen``: a dispatcher stopped by SIGSTOP for the length of a block;
  ``sender_of``: which dispatcher sent a request the receiver got;
  ``skewed_clock``: the environment that runs one with its clock off;
- ``backends`` / ``terminate``: the dispatchers' database connections, told
  apart by their application_name ("outbox-dispatcher claim", "... complete",
  "... maintenance", "... listener"), and ``pg_terminate_backend`` of one kind;
- ``expire_leases``: the time a lease takes to run out, made by back-dating
  rows instead of by sleeping (deliveries, request slots, probes and the
  maintainer lease);
- ``idle_holders``: dispatcher sessions idle in a transaction, holding locks
  or a snapshot, for the "no lock across a request" promise;
- ``crash`` and the ``server`` fixture: PostgreSQL stopped with ``-m
  immediate`` (no shutdown checkpoint, as a power cut to the server process
  would) and started again;
- ``ServerLog``: what the server logged since a test began (deadlocks);
- ``ClaimLog``: the size of every claim, recorded by a trigger in the test's
  own database, for "no claim takes more rows than it asked for".
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

import outbox
from outbox.testing import TemporaryPostgres
from tests.support.resilience import DispatcherProcess

if TYPE_CHECKING:
    from tests.conftest import Cluster

PREFIX = "outbox-dispatcher"
"""Every dispatcher connection's application_name starts with this."""


@contextlib.contextmanager
def frozen(process: DispatcherProcess) -> Iterator[None]:
    """SIGSTOP for the length of the block, SIGCONT after (also when the block fails)."""
    process.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        if process.alive():
            process.signal(signal.SIGCONT)


def sender_of(port: int, processes: Iterable[DispatcherProcess]) -> DispatcherProcess:
    """The dispatcher whose socket has local port ``port`` (a receiver's peer port).

    Reads /proc: the socket's inode from /proc/net/tcp, then which process
    holds a descriptor to it.
    """
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(f"socket:[{fields[9]}]")
    for process in processes:
        fds = Path(f"/proc/{process.proc.pid}/fd")
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in fds.iterdir()):
                return process
    raise AssertionError(f"no dispatcher holds a socket on port {port}")


def skewed_clock(offset: str) -> dict[str, str]:
    """Environment variables that run a process with its wall clock ``offset`` off ("+1h").

    libfaketime's preload library (the ``libfaketime`` package ships it)
    shifts every wall-clock read of the process, in C and in Python alike;
    monotonic clocks are left alone, as NTP would leave them.
    """
    spec = importlib.util.find_spec("libfaketime")
    if spec is None or not spec.origin:
        pytest.skip("libfaketime is not installed (a Linux-only test dependency)")
    library = Path(spec.origin).parent / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"
    if not library.exists():
        pytest.skip(f"libfaketime's library is missing: {library}")
    return {"LD_PRELOAD": str(library), "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "DONT_FAKE_MONOTONIC": "1"}


def backends(dsn: str, role: str | None = None) -> list[dict[str, Any]]:
    """The dispatchers' sessions on the database of ``dsn`` (of one role, when given)."""
    name = PREFIX if role is None else f"{PREFIX} {role}"
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT pid, application_name, state, client_port, backend_xmin::text AS xmin"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND (application_name = %s OR application_name LIKE %s)",
            (name, name + " %"))
        assert cur.description is not None
        columns = [c.name for c in cur.description]
        return [dict(zip(columns, row, strict=True)) for row in cur]


def terminate(dsn: str, role: str) -> list[int]:
    """``pg_terminate_backend`` every dispatcher connection of ``role``; their pids."""
    pids = [b["pid"] for b in backends(dsn, role)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return pids


def expire_leases(dsn: str) -> int:
    """Make every lease run out now, as it would have for a dispatcher dead that long.

    Deliveries in flight, request slots, a half-open circuit's probe and the
    maintainer lease: the next rescue (or claim, or contender) treats them
    as abandoned. Returns how many deliveries had their lease cut short.
    """
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        cur = conn.execute(
            "UPDATE outbox.deliveries SET lease_expires_at = now() - interval '1 second'"
            " WHERE state = 'in_flight'")
        conn.execute("UPDATE outbox.endpoint_slots SET expires_at = now() - interval '1 second'"
                     " WHERE expires_at > now()")
        conn.execute("UPDATE outbox.endpoint_state SET probe_until = now() - interval '1 second'"
                     " WHERE circuit = 'half-open'")
        conn.execute("UPDATE outbox.maintainer SET expires_at = now() - interval '1 second'")
        return cur.rowcount


def idle_holders(dsn: str, settled: float = 0.2) -> list[tuple[Any, ...]]:
    """Dispatcher sessions that hold something while idle; empty when none does.

    A session counts when it is idle in a transaction, or has been idle for
    ``settled`` seconds and still holds a lock or keeps a snapshot (xmin).
    The wait keeps a statement that ended a moment ago, between the two
    views being read, from being taken for a lock held across a request.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            """
            SELECT a.pid, a.application_name, a.state, a.backend_xmin::text, l.locks
            FROM pg_stat_activity a
            CROSS JOIN LATERAL (SELECT count(*) AS n,
                                       array_agg(mode || ' ' || locktype) AS locks
                                FROM pg_locks WHERE pid = a.pid) l
            WHERE a.datname = current_database() AND a.application_name LIKE %s
              AND a.pid <> pg_backend_pid()
              AND (a.state LIKE 'idle in transaction%%'
                   OR (a.state = 'idle'
                       AND a.state_change < clock_timestamp() - make_interval(secs => %s)
                       AND (a.backend_xmin IS NOT NULL OR l.n > 0)))
            """, (PREFIX + "%", settled)).fetchall()


def crash(server: TemporaryPostgres) -> None:
    """Stop PostgreSQL with ``-m immediate`` (no checkpoint, crash recovery at the next
    start), then start it again and wait until it accepts connections."""
    server.stop("immediate")
    server.start()
    server.wait_ready()


@pytest.fixture
def server(cluster: Cluster, fresh_db: str) -> Iterator[TemporaryPostgres]:
    """The session's own cluster, to stop and start; running again after the test.

    Asking for ``fresh_db`` orders the teardowns: the cluster is up again
    before the test's database is dropped.
    """
    if cluster.server is None:
        pytest.skip("the database server is external (OUTBOX_TEST_DSN): cannot restart it")
    try:
        yield cluster.server
    finally:
        try:
            psycopg.connect(cluster.admin_dsn, connect_timeout=5).close()
        except psycopg.OperationalError:  # the test failed while the server was down
            cluster.server.start()
            cluster.server.wait_ready()


class ServerLog:
    """The server's log from the moment this object was made (the cluster is shared)."""

    def __init__(self, server: TemporaryPostgres) -> None:
        self.path: Path = server.logfile
        self.start = self.path.stat().st_size if self.path.exists() else 0

    def since(self) -> str:
        with self.path.open("rb") as log:
            log.seek(self.start)
            return log.read().decode("utf-8", "replace")


class ClaimLog:
    """Counts the rows each claim took: a trigger on the test database logs every
    pending -> in_flight change with the id of the transaction that made it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("""
                CREATE TABLE public.claim_log (xid xid8 NOT NULL, delivery_id bigint NOT NULL);
                CREATE FUNCTION public.log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO public.claim_log VALUES (pg_current_xact_id(), NEW.id);
                    RETURN NULL;
                END $$;
                CREATE TRIGGER log_claim AFTER UPDATE OF state ON outbox.deliveries
                FOR EACH ROW WHEN (OLD.state = 'pending' AND NEW.state = 'in_flight')
                EXECUTE FUNCTION public.log_claim();
            """)

    def sizes(self) -> list[int]:
        """Rows per claim, largest first."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT count(*) FROM public.claim_log GROUP BY xid "
                                "ORDER BY 1 DESC").fetchall()
        return [int(n) for (n,) in rows]


class Producer(threading.Thread):
    """Publishes small batches in their own transactions until stopped, riding out outages.

    ``committed`` holds ids whose commit returned; ``in_doubt`` those whose
    commit raised (the connection died: committed or not, nobody knows).
    """

    def __init__(self, dsn: str, type_: str = "test.producer") -> None:
        super().__init__(daemon=True, name="producer")
        self.dsn = dsn
        self.type_ = type_
        self.committed: list[str] = []
        self.in_doubt: list[str] = []
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[object] | None = None
        while not self.halt.is_set():
            batch: list[str] = []
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=2)
                batch = [str(i) for i in outbox.publish_many(
                    conn, [outbox.Event(self.type_, {"n": n}) for n in range(5)])]
                conn.commit()
                self.committed += batch
            except psycopg.OperationalError:
                self.failures += 1
                self.in_doubt += batch
                if conn is not None:
                    conn.close()
            self.halt.wait(0.02)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)
