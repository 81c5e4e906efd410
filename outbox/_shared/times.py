"""Moments as both sides write them for people and programs: RFC 3339, in UTC, with ``Z``.

One spelling for the envelope the dispatcher sends (``timestamp``, ``time``,
``ce-time``) and for what the ``outbox`` command prints and reports, so that a
moment copied from one into the other reads the same.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

Precision = Literal["microseconds", "seconds", "auto"]


def rfc3339(moment: datetime, *, timespec: Precision = "microseconds") -> str:
    """``moment`` in UTC as RFC 3339 with ``Z`` (naive means UTC).

    ``timespec`` as ``datetime.isoformat`` takes it: microseconds always (the
    wire), whole seconds (tables), or microseconds only when there are some.
    """
    if moment.utcoffset():
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(timespec=timespec) + "Z"
