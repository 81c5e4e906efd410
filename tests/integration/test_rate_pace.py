"""The rate limit's two halves agree: the claimer looks again when the statement first grants
the next turn (``dispatcher.limits.rate.next_look`` against ``outbox.rate_*_v1``)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from dispatcher.limits import rate
from dispatcher.policy.model import Endpoint

Conn = psycopg.Connection[Any]
NEAR = 0.0005
"""Seconds either side of the look at which the statement must answer no, then yes: far
above the microseconds timestamps keep, far below a turn at the highest limit tried."""

# The turn after a request that waits ``send_in``, with the statement's pace: the claim moves
# the shared clock one turn past the last request it granted (``rate_next_turn_v1``). At
# ``look`` seconds from now, a claim takes a turn if ``rate_turns_v1`` grants one; a claim's
# now() cannot move, so the clock is moved back by ``look`` instead.
_GRANTED = """
WITH turn AS (
    SELECT outbox.rate_next_turn_v1(now() + make_interval(secs => %(send_in)s), 1,
                                    %(rate)s / %(pace)s) AS next_turn
)
SELECT outbox.rate_turns_v1(next_turn - make_interval(secs => %(look)s),
                            %(rate)s / %(pace)s, %(horizon)s, 1),
       outbox.rate_turn_near_v1(next_turn - make_interval(secs => %(look)s), %(horizon)s)
FROM turn
"""


def _granted(conn: Conn, rate_limit: float, send_in: float, look: float) -> tuple[int, bool]:
    [(turns, near)] = conn.execute(_GRANTED, {
        "send_in": send_in, "rate": rate_limit, "pace": rate.PACE, "look": look,
        "horizon": rate.RATE_HORIZON}).fetchall()
    return turns, near


@pytest.mark.parametrize("rate_limit", [0.5, 1, 3, 10, 50, 400])
@pytest.mark.parametrize("send_in", [0.0, 0.1, 0.4, 2.5])
def test_the_next_look_is_when_the_statement_grants_the_next_turn(
        conn: Conn, rate_limit: float, send_in: float) -> None:
    """Just before next_look the claim and the walk see no turn; just after, both see one."""
    endpoint = Endpoint(id=1, name="e", url="http://127.0.0.1:9/", rate_limit=rate_limit)
    look = rate.next_look(endpoint, send_in)
    assert look is not None
    assert _granted(conn, rate_limit, send_in, look - NEAR) == (0, False)
    assert _granted(conn, rate_limit, send_in, look + NEAR) == (1, True)
