"""Debian's PgBouncer in front of the test cluster, in transaction mode, for the pooler tests.

Started on 127.0.0.1 with its defaults where it matters: ``pool_mode =
transaction`` and no ``ignore_startup_parameters``, so that a client
sending ``options`` in its startup packet is refused, as in production.
PgBouncer refuses to run as root: as root it runs as the ``postgres`` user
(as the test cluster does), from a directory that user owns.
"""

from __future__ import annotations

import os
import pwd
import shutil

import psycopg

from tests.support.process import LocalServer

_CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
server_reset_query =
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
{extra}"""


def find_pgbouncer() -> str | None:
    """The pgbouncer binary, or None."""
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)),
        None)


class PgBouncer(LocalServer):
    """``with PgBouncer(dsn) as bouncer: bouncer.dsn_for(dsn)`` (same database, via the pooler)."""

    name = "pgbouncer"
    log_name = "pgbouncer.log"

    def __init__(self, server_dsn: str, *, pool_size: int = 4,
                 ignore_startup_parameters: str = "") -> None:
        """``ignore_startup_parameters``: PgBouncer's setting (default: none, its own)."""
        binary = find_pgbouncer()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed")
        self.binary = binary
        super().__init__()
        info = psycopg.conninfo.conninfo_to_dict(server_dsn)
        self.user = str(info.get("user") or "postgres")
        self._server = (str(info.get("host") or "127.0.0.1"), str(info.get("port") or 5432))
        self._password = str(info.get("password") or "")
        self._pool_size = pool_size
        self._extra = (f"ignore_startup_parameters = {ignore_startup_parameters}\n"
                       if ignore_startup_parameters else "")

    def dsn_for(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the pooler's."""
        return psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def command(self) -> list[str]:
        host, port = self._server
        # Clients are trusted; the server's password (the throwaway cluster's
        # superuser has one) is what the pooler signs in to the server with.
        (self.directory / "userlist.txt").write_text(f'"{self.user}" "{self._password}"\n',
                                                     "utf-8")
        (self.directory / "pgbouncer.ini").write_text(_CONFIG.format(
            host=host, port=port, listen_port=self.port,
            directory=self.directory,
            pool_size=self._pool_size, extra=self._extra), "utf-8")
        command = [self.binary, str(self.directory / "pgbouncer.ini")]
        if os.geteuid() == 0:  # pgbouncer will not run as root
            owner = pwd.getpwnam("postgres")
            for path in (self.directory, *self.directory.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            command = ["runuser", "-u", "postgres", "--", *command]
        return command
