"""How the commands and the web view say ages, who holds the horizon back and what a
retry-now did, in words."""

from __future__ import annotations

from outbox import admin
from outbox._shared.text import counted
from outbox.endpoints import RetryNow


def format_age(seconds: float) -> str:
    """A short human age: 45s, 12m05s, 3h07m, 2d04h."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


NONE_ALIVE = "none (no heartbeat in the last 30 s): nothing is delivered until one runs"
"""What is said of a database no live dispatcher serves (the web view draws it in red)."""


def alive_line(status: admin.Status) -> str:
    """``dispatchers alive: N``, or that none is and nothing is delivered."""
    return f"dispatchers alive: {status.dispatchers or NONE_ALIVE}"


def served_line(status: admin.Status) -> str | None:
    """``served by: HOST (pid N), ...``: the processes alive here; None when none said so."""
    if not status.served_by:
        return None
    return "served by: " + ", ".join(str(s) for s in status.served_by)


def describe_horizon(h: admin.HorizonHolder) -> str:
    """One line naming who holds the horizon back, how long, and what it costs."""
    if h.source == "slot":
        who = f"replication slot {h.name}" + (f" (pid {h.pid})" if h.pid is not None else "")
    elif h.source == "prepared":
        who = f"prepared transaction {h.name!r} (owner {h.user})"
    else:
        about = ", ".join(part for part in (
            f"application {h.application_name!r}" if h.application_name else "",
            f"user {h.user}" if h.user else "") if part)
        who = f"pid {h.pid}" + (f" ({about})" if about else "")
    if h.held_seconds is not None:
        verb = "prepared" if h.source == "prepared" else "open"
        held = f"{verb} for {format_age(h.held_seconds)}"
    elif h.source == "backend":
        held = "open for a time this role may not see (pg_monitor shows it)"
    else:
        held = "held"
    return (f"horizon held by {who}: {held}, {h.age_xids:,} transactions old; vacuum cannot "
            "remove dead deliveries behind it, so claims slow down")


def retry_now_said(done: RetryNow, name: str, *, tenant: str | None = None,
                   dry_run: bool = False) -> str:
    """What ``retry-now`` did at endpoint ``name`` (``dry_run``: would do), in one line:
    ``outbox endpoints retry-now`` prints it, and the endpoint's page after its form.

    The count alone can mislead: deliveries held only by an open circuit were
    due already and are not counted, yet the circuit going half-open sends
    them; so whether it did is said too, and that a disabled endpoint keeps
    them waiting.
    """
    whose = f" of tenant {tenant}" if tenant is not None else ""
    what = f"{counted(done.due, 'pending delivery', 'pending deliveries')}{whose}"
    notes = [f"{'would make' if dry_run else 'made'} {what} of endpoint {name} due now"]
    if done.half_open:
        notes.append("its open circuit " + ("would go" if dry_run else "went")
                     + " half-open: the next request is the probe")
    if not done.enabled:
        notes.append("the endpoint is disabled: they wait until it is enabled")
    if dry_run:
        notes.append("dry run, nothing changed")
    return "; ".join(notes)
