"""outbox_endpoint_info from a running dispatcher: each endpoint's tenant and who disabled it."""

from __future__ import annotations

from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

import outbox.endpoints
from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import Dispatcher, add_endpoint, outbox_cli, publish, wait_until


def info(text: str) -> dict[str, tuple[str, str]]:
    """endpoint -> (tenant, disabled_by) of every outbox_endpoint_info series (each 1)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "outbox_endpoint_info":
                assert sample.value == 1.0, sample
                found[sample.labels["endpoint"]] = (sample.labels["tenant"],
                                                    sample.labels["disabled_by"])
    return found


def test_endpoint_info_says_whose_each_endpoint_is_and_who_disabled_it(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """One series per endpoint: tenant "" for none; disabled_by "" while enabled, operator after
    `outbox endpoints disable`, application after outbox.endpoints.disable(), gone after a 410
    (also one a dispatcher of the release before wrote without disabled_by)."""
    def gone(request: Request) -> Response:
        return Response(410 if request.path.endswith("/moved") else 200)
    receiver.responder = gone
    add_endpoint(conn, "ours", receiver.url, events=("never.*",))
    for name, tenant in (("acme-hook", "acme"), ("acme-paused", "acme"),
                         ("globex-off", "globex")):
        outbox.endpoints.add(conn, name, url=receiver.url, events=["never.*"], tenant=tenant)
    outbox.endpoints.add(conn, "moved", url=receiver.url.rstrip("/") + "/moved",
                         events=["order.*"], tenant="initech")
    conn.commit()
    add_endpoint(conn, "moved-long-ago", receiver.url, events=("never.*",), enabled=False,
                 disabled_reason="410 Gone at 2026-01-05T10:00:00+00:00")
    done = outbox_cli(dsn, "endpoints", "disable", "acme-paused")
    assert done.returncode == 0, done.stderr
    outbox.endpoints.disable(conn, "globex-off", as_tenant="globex")
    conn.commit()
    publish(conn, "order.created", {"n": 1}, tenant="initech")
    with Dispatcher(dsn) as dispatcher:
        dispatcher.wait_serving()

        def disabled_by_410() -> dict[str, tuple[str, str]] | None:
            found = info(dispatcher.get("/metrics").text)
            return found if found.get("moved", ("", ""))[1] == "gone" else None
        found = wait_until(disabled_by_410, dispatcher=dispatcher,
                           what="the 410 to show as disabled_by gone")
    assert found == {"ours": ("", ""), "acme-hook": ("acme", ""),
                     "acme-paused": ("acme", "operator"),
                     "globex-off": ("globex", "application"),
                     "moved": ("initech", "gone"), "moved-long-ago": ("", "gone")}
