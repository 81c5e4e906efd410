"""What a database's ``outbox`` schema holds, and whether a program can work on it.

The ``outbox`` command and the dispatcher read the same two facts (which
parts exist, which versions are recorded) and judge them here, so that both
say the same thing in the same words: the version found, the version
needed and ``outbox migrate``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchemaState:
    """The parts present (the outbox's tables, the inbox) and the versions recorded."""

    versions_table: bool
    outbox: bool
    inbox: bool
    versions: frozenset[int]

    @property
    def version(self) -> int:
        """The highest version recorded; 0 without any."""
        return max(self.versions, default=0)


def outbox_problem(state: SchemaState, needed: int) -> str | None:
    """Why a program needing schema version ``needed`` cannot work here; None when it can.

    A newer schema is fine: upgrades keep the previous version working
    (docs/upgrading.md, "Upgrading").
    """
    if not state.outbox:
        if state.inbox:
            return ("the outbox is missing: this database holds only the inbox "
                    f"(`outbox migrate --inbox-only`), version {needed} of the outbox is "
                    "needed: run `outbox migrate` to add it")
        return (f"the outbox schema is missing (no version found, version {needed} needed): "
                "run `outbox migrate` first")
    if state.version < needed:
        return (f"the outbox schema is at version {state.version}, older than version "
                f"{needed} that this outbox-dispatcher needs: run `outbox migrate`")
    return None
