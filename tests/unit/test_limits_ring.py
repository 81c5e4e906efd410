"""Fair rounds' Python half: the cursor each endpoint's next walk starts after, and the place
of a group waiting for a slot among the tenants' rounds (the SQL half, the claim's deal:
tests/integration/test_tenant_turns.py)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.limits.ring import RING_STEPS, Ring, place


@dataclass(frozen=True)
class _Row:
    endpoint_id: int
    grp: int
    tenant: str | None


@dataclass(frozen=True)
class _Group:
    tenant: str | None


def test_a_new_endpoint_walks_from_the_start_of_the_ring() -> None:
    assert Ring().for_claim([1, 2]) == {"ring_after": [None, None],
                                        "ring_null": [False, False],
                                        "ring_steps": RING_STEPS}


def test_the_cursor_moves_to_the_tenant_of_each_endpoints_last_request() -> None:
    """Per endpoint, the tenant of its highest group; none: the deliveries without a tenant."""
    ring = Ring()
    ring.claimed([_Row(1, 0, "a"), _Row(1, 2, "c"), _Row(1, 1, "b"),
                  _Row(2, 0, "x"), _Row(2, 1, None)])
    assert ring.for_claim([1, 2, 3]) == {"ring_after": ["c", None, None],
                                         "ring_null": [False, True, False],
                                         "ring_steps": RING_STEPS}
    ring.claimed([])  # a claim that found nothing leaves the cursors where they were
    assert ring.for_claim([1])["ring_after"] == ["c"]


def _order(tenants: list[str | None]) -> list[str | None]:
    waiting: list[_Group] = []
    for tenant in tenants:
        waiting.insert(place(waiting, tenant), _Group(tenant))
    return [group.tenant for group in waiting]


def test_a_waiting_group_goes_at_the_end_of_its_tenants_next_round() -> None:
    """A's five groups wait; B's first goes after A's first, its second after A's second."""
    assert _order(["a"] * 5 + ["b"]) == ["a", "b", "a", "a", "a", "a"]
    assert _order(["a"] * 5 + ["b", "b"]) == ["a", "b", "a", "b", "a", "a", "a"]
    assert _order(["a", "a", "b", "c", None]) == ["a", "b", "c", None, "a"]


def test_one_tenants_groups_keep_their_order() -> None:
    """Groups of one tenant stay in the order they came (their claim's order)."""
    waiting: list[_Group] = []
    groups = [_Group("a"), _Group("b"), _Group("a"), _Group("a"), _Group("b")]
    for group in groups:
        waiting.insert(place(waiting, group.tenant), group)
    a_groups = [g for g in waiting if g.tenant == "a"]
    assert [id(g) for g in a_groups] == [id(g) for g in groups if g.tenant == "a"]


def _rounds_walk(waiting: list[_Group], tenant: str | None) -> int:
    """The rule as written: the first group in a round after the new group's own."""
    mine = sum(1 for group in waiting if group.tenant == tenant)
    seen: dict[str | None, int] = {}
    for index, group in enumerate(waiting):
        seen[group.tenant] = seen.get(group.tenant, 0) + 1
        if seen[group.tenant] - 1 > mine:
            return index
    return len(waiting)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", None]), st.booleans()),
                max_size=60))
def test_the_place_is_the_rules_whatever_waits(steps: list[tuple[str | None, bool]]) -> None:
    """Over any history of groups queued and started (the first one leaving), place
    (which skips the walk when no round after the new group's has begun) puts each group
    where the rule's walk does."""
    waiting: list[_Group] = []
    for tenant, starts in steps:
        if starts and waiting:
            waiting.pop(0)
        assert place(waiting, tenant) == _rounds_walk(waiting, tenant)
        waiting.insert(place(waiting, tenant), _Group(tenant))
