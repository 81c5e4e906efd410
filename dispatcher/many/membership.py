"""Who is in the fleet: each member's session in the home database, read by every member.

A member beats by writing into its own session's ``application_name``
(``outbox-dispatcher member FLEET ID EPOCH``, the database's clock) every
third of ``--lease``, and reads the sessions of its fleet whose beat is
younger than ``--lease`` (``fleet_beat`` and ``fleet_members`` in
fleet.sql). Nothing is written to any table, so no migration is needed and
the previous release is untouched; every role may read ``application_name``
in ``pg_stat_activity``. Every role may set its own too, so only the
sessions logged in as this member's own role count (the home DSN's: every
member of a fleet logs in with it), and a beat ahead of the database's
clock (beyond :data:`SKEW`) does not: a session of another role that copies
a member's name moves no database. A member that dies takes its session
along (at once for a process killed, within the lease for one frozen or cut
off), so its databases move to the others within twice ``--lease``.

The home database is the catalog's when the file has one, else the first
database the file lists; its session must be a direct one (a transaction
pooler keeps no session): the entry's ``listen_dsn`` when it has one. When
the members cannot be read, the caller keeps its last view.
"""

from __future__ import annotations

import hashlib
import uuid

import psycopg

from dispatcher.db import APPLICATION_NAME, Database, DatabaseDown, Health
from outbox._shared.dsn import without_passwords
from outbox._shared.text import first_line

SKEW = 5.0
"""Seconds a beat may stand ahead of the home database's clock and still count: every beat
is read from that same clock, so only the time between two statements is allowed for."""


def fleet_of(home_key: str) -> str:
    """The fleet's name: dispatchers with the same home (the same file) share one."""
    return hashlib.blake2b(home_key.encode(), digest_size=4).hexdigest()


class Membership:
    """This member's beat, and the live members it reads at each beat."""

    def __init__(self, home_dsn: str, *, fleet: str, lease: float,
                 me: str | None = None) -> None:
        self.me = me or uuid.uuid4().hex[:12]
        self.home_dsn = home_dsn
        self._db = Database(home_dsn, Health(quiet=True), "member")
        self._prefix = f"{APPLICATION_NAME} member {fleet} {self.me} "
        self._pattern = f"{APPLICATION_NAME} member {fleet} %"
        self._lease = lease
        self.problem = ""  # why the members could not be read, the last time

    async def beat(self) -> set[str] | None:
        """Beat, then the live members' ids (this one's included); None when the home
        database does not answer."""
        try:
            await self._db.fetch("fleet_beat", {"prefix": self._prefix})
            rows = await self._db.fetch("fleet_members", {"pattern": self._pattern,
                                                          "lease": self._lease,
                                                          "skew": SKEW})
        except (DatabaseDown, psycopg.Error) as exc:
            await self._db.close()
            self.problem = without_passwords(first_line(exc), [self.home_dsn])
            return None
        return {str(row[0]) for row in rows} | {self.me}

    async def close(self) -> None:
        """Leave the fleet: the session ends, and the others take its databases."""
        await self._db.close()
