"""check_url=True: add and update judge the URL first and save the endpoint guarded, and the
dispatcher applies the private-network guard to a guarded endpoint whatever its own flags
(real PostgreSQL, the real dispatcher, a receiver on 127.0.0.1)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from outbox import endpoints
from outbox.testing import Receiver
from tests.integration.test_endpoints_tenant_guard import everything
from tests.support.dispatcher import add_endpoint, delivery, publish, run_once

Conn = psycopg.Connection[Any]


def guarded(conn: Conn, name: str) -> bool:
    return bool(endpoints.get(conn, name)["guarded"])


def test_check_url_saves_the_endpoint_guarded_for_good(conn: Conn) -> None:
    """add(check_url=True) saves it guarded; an update without check_url keeps it so; an
    update with it guards an endpoint saved without, judging its stored URL."""
    endpoints.add(conn, "customer", url="https://hooks.customer.example/", check_url=True)
    endpoints.add(conn, "plain", url="https://hooks.other.example/")
    assert (guarded(conn, "customer"), guarded(conn, "plain")) == (True, False)
    assert endpoints.update(conn, "customer", url="https://new.customer.example/") == ["url"]
    assert guarded(conn, "customer")
    assert endpoints.update(conn, "plain", check_url=True) == []
    assert guarded(conn, "plain")
    assert endpoints.list(conn)[0]["guarded"] is True


@pytest.mark.parametrize("call", [
    lambda c: endpoints.add(c, "new", url="http://127.1:8080/", check_url=True),
    lambda c: endpoints.add(c, "new", url="http://api.localhost/", check_url=True),
    lambda c: endpoints.update(c, "internal", check_url=True),
    lambda c: endpoints.update(c, "internal", max_attempts=3, check_url=True),
    lambda c: endpoints.update(c, "customer", url="http://[::ffff:10.0.0.1]/", check_url=True),
])
def test_a_refused_url_writes_nothing(conn: Conn, call: Any) -> None:
    """An internal URL given, or the one stored when none is given: InvalidEndpoint naming
    url, and the endpoints as they were (none guarded that was not)."""
    endpoints.add(conn, "customer", url="https://hooks.customer.example/", check_url=True)
    endpoints.add(conn, "internal", url="http://10.1.2.3/hook")
    conn.commit()
    before = everything(conn)
    with pytest.raises(endpoints.InvalidEndpoint, match=r"^url "):
        call(conn)
    conn.commit()
    assert everything(conn) == before


def test_the_dispatcher_guards_a_guarded_endpoint_whatever_its_flags(
        conn: Conn, dsn: str, receiver: Receiver) -> None:
    """Without --block-private-networks, a guarded endpoint whose name resolves to loopback
    (written by SQL: check_url refuses localhost by name) is refused at connect time, a dead
    letter saying why; the same URL unguarded is delivered; --allow-network still admits."""
    url = receiver.url.replace("127.0.0.1", "localhost")
    add_endpoint(conn, "guarded", url, guarded=True)
    refused = publish(conn, "order.created", {"n": 1})
    code, log = run_once(dsn)
    assert code == 1, log
    row = delivery(conn, refused)
    assert (row["state"], row["last_status"]) == ("dead", None)
    assert "private-network guard" in row["last_error"]
    assert "localhost resolves only to private or internal addresses" in row["last_error"]
    assert receiver.snapshot() == []

    conn.execute("UPDATE outbox.endpoints SET guarded = false")
    allowed = publish(conn, "order.created", {"n": 2})
    assert run_once(dsn)[0] == 0
    assert delivery(conn, allowed)["state"] == "delivered"

    conn.execute("UPDATE outbox.endpoints SET guarded = true")
    excepted = publish(conn, "order.created", {"n": 3})
    code, log = run_once(dsn, "--allow-network", "127.0.0.0/8", "--allow-network", "::1/128")
    assert code == 0, log
    assert delivery(conn, excepted)["state"] == "delivered"
    assert len(receiver.snapshot()) == 2
