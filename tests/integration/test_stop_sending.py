""""Stop sending": disable(drop=True) discards what waits at once and says how many; what is
made for the endpoint meanwhile is discarded by the maintainer; replay, retry-now and dead
retry change nothing there; a sync keeps it; enable delivers what comes after it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import outbox
from outbox import admin, endpoints
from outbox.endpoints import EndpointSpec, sync_endpoints
from outbox.sql import queries
from tests.support.claiming import claim, finish

Conn = psycopg.Connection[Any]
URL = "http://127.0.0.1:9/hooks"


def _hooks(conn: Conn, **options: Any) -> int:
    endpoints.add(conn, "hooks", url=URL, **options)
    row = conn.execute("SELECT id FROM outbox.endpoints WHERE name = 'hooks'").fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def _publish(conn: Conn, count: int) -> list[str]:
    ids = outbox.publish_many(conn, [outbox.Event("order.created", {"n": n})
                                     for n in range(count)])
    conn.commit()
    return [str(i) for i in ids]


def _states(conn: Conn) -> dict[str, int]:
    rows = conn.execute("SELECT state, count(*) FROM outbox.deliveries GROUP BY state")
    found = {str(state): int(n) for state, n in rows}
    conn.commit()
    return found


def _discard(conn: Conn, endpoint_id: int) -> list[tuple[Any, ...]]:
    rows = conn.execute(queries["discard_over"], {"ids": [endpoint_id]}).fetchall()
    conn.commit()
    return [tuple(r) for r in rows]


def test_disable_with_drop_discards_what_waits_and_says_how_many(conn: Conn) -> None:
    """Four pending go at once (returned), the one in flight finishes as it will; the endpoint
    is disabled by the application, dropping; its counter follows."""
    hooks = _hooks(conn, max_pending=100)
    _publish(conn, 5)
    [flying] = claim(conn, [hooks], rows=1, requests=1)
    assert endpoints.disable(conn, "hooks", drop=True) == 4
    conn.commit()
    assert _states(conn) == {"discarded": 4, "in_flight": 1}
    shown = endpoints.get(conn, "hooks")
    assert (shown["enabled"], shown["dropping"], shown["disabled_by"]) == \
        (False, True, "application")
    row = conn.execute("SELECT held FROM outbox.backlog_v1(%s)", (hooks,)).fetchone()
    assert row == (1,)
    finish(conn, flying, "pending")  # it failed: pending again, then discarded by the policy
    assert _discard(conn, hooks) == [(hooks, "disabled", 1)]
    assert _states(conn) == {"discarded": 5}
    row = conn.execute("SELECT held FROM outbox.backlog_v1(%s)", (hooks,)).fetchone()
    assert row == (0,)


def test_an_open_transaction_that_dropped_holds_up_no_dispatcher(dsn: str, conn: Conn) -> None:
    """While the application's transaction that called disable(drop=True) stays open, a
    dispatcher still records its results at that bounded endpoint and the maintainer's
    discard runs (neither waits for it); once it commits, the counter adds up."""
    hooks = _hooks(conn, max_pending=100, when_full="drop-oldest")
    _publish(conn, 4)
    first, second = claim(conn, [hooks], rows=2, requests=2)
    assert endpoints.disable(conn, "hooks", drop=True) == 2  # not committed yet
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SET lock_timeout = '2s'")
        finish(other, first)
        other.execute(queries["discard_over"], {"ids": [hooks]}).fetchall()
    conn.commit()
    finish(conn, second, "pending")
    assert _discard(conn, hooks) == [(hooks, "disabled", 1)]
    assert _states(conn) == {"delivered": 1, "discarded": 3}
    row = conn.execute("SELECT held FROM outbox.backlog_v1(%s)", (hooks,)).fetchone()
    assert row == (0,)


def test_what_is_made_meanwhile_is_discarded_and_nothing_brings_it_back(conn: Conn) -> None:
    """Publishes after disable --drop make deliveries the maintainer discards (reason
    disabled); replay, retry-now and dead retry count 0 and change nothing there."""
    hooks = _hooks(conn)
    _publish(conn, 2)
    conn.execute("UPDATE outbox.deliveries SET state = 'dead', finished_at = now() "
                 "WHERE id = (SELECT min(id) FROM outbox.deliveries)")
    conn.commit()
    assert endpoints.disable(conn, "hooks", drop=True) == 1
    conn.commit()
    _publish(conn, 3)
    assert _discard(conn, hooks) == [(hooks, "disabled", 3)]
    before = _states(conn)
    assert before == {"dead": 1, "discarded": 4}
    replayed = admin.replay(conn, "hooks", since=timedelta(hours=1))
    assert (replayed.replayed, replayed.skipped, replayed.endpoint_dropping) == (0, 0, True)
    assert endpoints.retry_now(conn, "hooks") == 0
    conn.commit()
    retried = admin.retry_dead(conn, endpoint="hooks")
    assert (retried.retried, retried.dropping_endpoints) == (0, ["hooks"])
    assert _states(conn) == before


def test_enable_delivers_what_comes_after_it(conn: Conn) -> None:
    """enable clears dropping and who disabled it; what was made before it and not yet
    discarded goes then, and what is published afterwards waits to be delivered."""
    hooks = _hooks(conn)
    assert endpoints.disable(conn, "hooks", drop=True) == 0
    conn.commit()
    _publish(conn, 2)  # no dispatcher discarded these yet
    endpoints.enable(conn, "hooks")
    conn.commit()
    assert _states(conn) == {"discarded": 2}
    shown = endpoints.get(conn, "hooks")
    assert (shown["enabled"], shown["dropping"], shown["disabled_by"],
            shown["disabled_reason"]) == (True, False, None, None)
    _publish(conn, 3)
    assert _discard(conn, hooks) == []
    assert _states(conn) == {"discarded": 2, "pending": 3}


def test_a_plain_disable_is_a_pause_again(conn: Conn) -> None:
    """After disable --drop, a plain disable keeps what is published: dropping is cleared and
    the endpoint is still disabled, by whoever disabled it last."""
    hooks = _hooks(conn)
    endpoints.disable(conn, "hooks", drop=True)
    assert endpoints.disable(conn, "hooks") == 0
    conn.commit()
    _publish(conn, 2)
    assert _discard(conn, hooks) == []
    assert _states(conn) == {"pending": 2}
    shown = endpoints.get(conn, "hooks")
    assert (shown["enabled"], shown["dropping"], shown["disabled_by"]) == \
        (False, False, "application")


def test_a_sync_keeps_dropping_as_it_is(conn: Conn) -> None:
    """A sync file that names the endpoint (with another option changed) leaves it disabled,
    dropping, by whom it was."""
    _hooks(conn)
    endpoints.disable(conn, "hooks", drop=True)
    conn.commit()
    spec = EndpointSpec.from_options("hooks", {"url": URL, "max_attempts": 3, "headers": {}})
    sync_endpoints(conn, [spec], force=False)
    conn.commit()
    shown = endpoints.get(conn, "hooks")
    assert (shown["enabled"], shown["dropping"], shown["disabled_by"], shown["max_attempts"]) \
        == (False, True, "application", 3)


def test_drop_must_be_a_yes_or_no(conn: Conn) -> None:
    """disable(drop="yes") is refused with InvalidEndpoint naming drop, and changes nothing."""
    _hooks(conn)
    with pytest.raises(endpoints.InvalidEndpoint) as refused:
        endpoints.disable(conn, "hooks", drop="yes")  # type: ignore[arg-type]
    assert refused.value.field == "drop"
    assert endpoints.get(conn, "hooks")["enabled"] is True


def test_the_async_twin_discards_too(dsn: str, conn: Conn) -> None:
    """adisable(drop=True) returns how many it discarded, as disable does."""
    _hooks(conn)
    _publish(conn, 3)

    async def scenario() -> int:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            found = await endpoints.adisable(aconn, "hooks", drop=True)
            await aconn.commit()
            return found

    assert asyncio.run(scenario()) == 3
    assert _states(conn) == {"discarded": 3}
