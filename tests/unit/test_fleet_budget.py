"""The connection budget: never more than its limit, and room kept for the short looks."""

from __future__ import annotations

import asyncio

from dispatcher.many.budget import Budget


def test_take_refuses_what_would_pass_the_limit_or_the_room_kept() -> None:
    """take() never passes the limit, nor eats into the room a caller asks to keep."""
    budget = Budget(12)
    assert budget.take(5, keep=1)
    assert budget.take(5, keep=1)  # 10 taken, 2 left
    assert not budget.take(5)
    assert not budget.take(2, keep=1)
    assert budget.take(1, keep=1)
    budget.give_now(5)
    assert budget.used == 6


def test_a_look_waits_for_a_connection_given_back() -> None:
    """A short look waits while the budget is full and goes on once one is given back."""
    async def scenario() -> list[str]:
        budget = Budget(2)
        assert budget.take(2)
        said: list[str] = []

        async def look() -> None:
            async with budget.one():
                said.append("looked")

        task = asyncio.create_task(look())
        await asyncio.sleep(0.01)
        said.append("waiting")
        await budget.give(1)
        await asyncio.wait_for(task, 5)
        assert budget.used == 1
        return said

    assert asyncio.run(scenario()) == ["waiting", "looked"]
