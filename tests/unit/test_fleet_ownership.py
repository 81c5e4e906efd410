"""Rendezvous hashing shares the databases between the fleet's members, and moves few."""

from __future__ import annotations

from dispatcher.many.ownership import owned, owner

DATABASES = [f"tenant-{i}" for i in range(200)]


def test_every_database_has_exactly_one_owner() -> None:
    """Each database is owned by one member, and every member computes the same owner."""
    members = ["a1", "b2", "c3"]
    shares = [owned(DATABASES, members, me) for me in members]
    assert sum(len(share) for share in shares) == len(DATABASES)
    assert set().union(*shares) == set(DATABASES)
    assert all(len(share) > 30 for share in shares)  # roughly even: 200/3 each


def test_a_member_leaving_moves_only_its_own_databases() -> None:
    """When a member leaves, only the databases it held change owner."""
    before = {name: owner(name, ["a1", "b2", "c3"]) for name in DATABASES}
    after = {name: owner(name, ["a1", "b2"]) for name in DATABASES}
    moved = {name for name in DATABASES if before[name] != after[name]}
    assert moved == {name for name in DATABASES if before[name] == "c3"}


def test_alone_a_member_owns_everything() -> None:
    """A member that sees no other (or cannot read them) serves every database."""
    assert owned(DATABASES, [], "a1") == set(DATABASES)
