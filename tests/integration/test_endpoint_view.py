"""The dispatcher's view of the endpoints, kept up to date in steps on a real database."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from dispatcher.endpoint_view import EndpointView
from outbox.sql import queries
from tests.support.dispatcher import add_endpoint

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def refresh(conn: psycopg.Connection[Any], view: EndpointView) -> list[int] | None:
    """What ``Maintenance.refresh_endpoints`` does; the ids read again (None: nothing changed)."""
    row = conn.execute(queries["endpoints_fingerprint"]).fetchone()
    assert row is not None
    digest, now = row
    if view.current(digest, now):
        return None
    versions = dict(conn.execute(queries["endpoint_versions"]).fetchall())
    stale = view.stale(versions, now)
    rows = conn.execute(queries["load_endpoints"], {"ids": stale}).fetchall()
    view.update(digest, versions, rows)
    conn.commit()
    return stale


def test_only_changed_endpoints_are_read_again(conn: psycopg.Connection[Any]) -> None:
    """One row when nothing changed; after an edit by hand, only that endpoint is reloaded."""
    ids = [add_endpoint(conn, f"e{i}", f"http://127.0.0.1/{i}") for i in range(50)]
    view = EndpointView({})
    assert sorted(refresh(conn, view) or []) == ids
    assert refresh(conn, view) is None
    conn.execute("UPDATE outbox.endpoints SET url = 'http://127.0.0.1/new' WHERE id = %s",
                 (ids[7],))
    conn.commit()
    assert refresh(conn, view) == [ids[7]]
    endpoint = view.usable(ids[7])
    assert endpoint is not None
    assert endpoint.url == "http://127.0.0.1/new"


def test_removed_and_disabled_endpoints_are_not_claimed_for(
        conn: psycopg.Connection[Any]) -> None:
    """A removed endpoint leaves the view; a disabled one stays known but unusable."""
    gone = add_endpoint(conn, "gone", "http://127.0.0.1/a")
    paused = add_endpoint(conn, "paused", "http://127.0.0.1/b")
    view = EndpointView({})
    refresh(conn, view)
    conn.execute("UPDATE outbox.endpoints SET removed_at = now() WHERE id = %s", (gone,))
    conn.execute("UPDATE outbox.endpoints SET enabled = false WHERE id = %s", (paused,))
    conn.commit()
    refresh(conn, view)
    assert view.describe(gone) == f"#{gone}"
    assert view.usable(paused) is None
    assert view.describe(paused) == "paused"


def test_an_endpoint_is_read_again_when_its_old_secrets_overlap_ends(
        conn: psycopg.Connection[Any]) -> None:
    """A rotated secret stops signing when its overlap ends, with nothing else changed."""
    ep = add_endpoint(conn, "rotating", "http://127.0.0.1/", secret=SECRET,
                      previous_secrets=[{"secret": SECRET, "expires_at": "2000-01-01T00:00:00Z"}])
    other = add_endpoint(conn, "other", "http://127.0.0.1/x")
    conn.execute("UPDATE outbox.endpoints SET previous_secrets = jsonb_build_array("
                 "jsonb_build_object('secret', %s::text, 'expires_at',"
                 " clock_timestamp() + interval '1 second')) WHERE id = %s", (SECRET, ep))
    conn.commit()
    view = EndpointView({})
    refresh(conn, view)
    endpoint = view.usable(ep)
    assert endpoint is not None
    assert len(endpoint.keys) == 2
    time.sleep(1.1)
    assert refresh(conn, view) == [ep]
    endpoint = view.usable(ep)
    assert endpoint is not None
    assert len(endpoint.keys) == 1
    assert view.usable(other) is not None
