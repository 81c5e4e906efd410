"""The attempts' shared deadlines: a request past its deadline is timed out, others are not."""

from __future__ import annotations

import asyncio

from dispatcher.http.deadlines import Deadlines


async def _request(deadlines: Deadlines, seconds: float, lasts: float) -> str:
    deadline = deadlines.start(seconds)
    try:
        await asyncio.sleep(lasts)
        return "answered"
    except asyncio.CancelledError:
        if not deadline.timed_out():
            raise
        return "timed out"
    finally:
        deadlines.end(deadline)


def test_only_the_requests_past_their_deadline_time_out() -> None:
    """Requests sharing one timer: the slow ones time out, the quick ones are answered."""
    async def main() -> list[str]:
        deadlines = Deadlines()
        return await asyncio.gather(
            _request(deadlines, 0.05, 5.0), _request(deadlines, 5.0, 0.01),
            _request(deadlines, 0.1, 5.0), _request(deadlines, 5.0, 0.2))

    assert asyncio.run(main()) == ["timed out", "answered", "timed out", "answered"]


def test_a_cancellation_of_its_own_is_no_timeout() -> None:
    """A request cancelled by someone else (a graceful stop) is cancelled, not timed out."""
    async def main() -> bool:
        deadlines = Deadlines()
        task = asyncio.create_task(_request(deadlines, 5.0, 5.0))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(main())


def test_a_new_event_loop_gets_a_timer_of_its_own() -> None:
    """Deadlines used again under another event loop still fire."""
    deadlines = Deadlines()

    async def main() -> str:
        return await _request(deadlines, 0.05, 5.0)

    assert asyncio.run(main()) == "timed out"
    assert asyncio.run(main()) == "timed out"
