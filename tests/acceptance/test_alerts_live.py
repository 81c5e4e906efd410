"""deploy/prometheus: a real Prometheus scraping a real dispatcher fires the alerts on a failing
endpoint (the rules' ``for:`` shortened, tests/support/prometheus.py), and the dashboard's
queries run against it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from outbox.testing import Receiver, Request, Response
from tests.support.dispatcher import Dispatcher, add_endpoint, publish, wait_until
from tests.support.prometheus import Prometheus, binary, dashboard_queries

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(binary() is None,
                                 reason="prometheus is not installed (Debian: prometheus)")]

# Each alert the test waits for, and the endpoint it must name: ours page, a customer's
# (tenant acme) have their own rules.
WANTED = {"OutboxDeliveryFailing": "workflow", "OutboxCircuitOpen": "workflow",
          "OutboxEndpointDisabled": "gone",
          "OutboxCustomerDeliveryFailing": "acme-hook", "OutboxCustomerCircuitOpen": "acme-hook",
          "OutboxCustomerEndpointDisabled": "acme-moved"}
CUSTOMERS = {"acme-hook", "acme-moved", "acme-paused"}


def unavailable(request: Request) -> Response:
    return Response(410 if request.path.endswith(("/gone", "/acme-moved")) else 503)


@pytest.mark.timeout(180)
def test_failing_endpoint_fires_delivery_failing_and_circuit_open(
        conn: psycopg.Connection[Any], dsn: str, receiver: Receiver) -> None:
    """A 503 endpoint fires OutboxDeliveryFailing and OutboxCircuitOpen, a 410 one
    OutboxEndpointDisabled; a customer's the customer rules, with its tenant, and none of
    ours; one its application disabled, nothing. The panels show it."""
    receiver.responder = unavailable
    add_endpoint(conn, "workflow", receiver.url, max_attempts=10_000, breaker_failures=3,
                 breaker_cooldown_seconds=1)
    add_endpoint(conn, "gone", receiver.url.rstrip("/") + "/gone", events=("order.*",))
    add_endpoint(conn, "acme-hook", receiver.url.rstrip("/") + "/acme-hook", tenant="acme",
                 max_attempts=10_000, breaker_failures=3, breaker_cooldown_seconds=1)
    add_endpoint(conn, "acme-moved", receiver.url.rstrip("/") + "/acme-moved", tenant="acme")
    add_endpoint(conn, "acme-paused", receiver.url.rstrip("/") + "/acme-paused",
                 tenant="acme", enabled=False, disabled_by="application",
                 disabled_reason="disabled by the application")
    for n in range(5):
        publish(conn, "order.created", {"n": n})
        publish(conn, "order.created", {"n": n}, tenant="acme")
    with Dispatcher(dsn) as dispatcher:
        dispatcher.wait_serving()
        with Prometheus([f"127.0.0.1:{dispatcher.port}"]) as prom:
            rules = {rule["name"]: rule for group in prom.api("rules")["groups"]
                     for rule in group["rules"]}
            assert rules["OutboxCircuitOpen"]["duration"] == 15  # 15m, shortened

            def firing() -> dict[str, str] | None:
                states = prom.alerts()
                return states if all(states.get(name) == "firing" for name in WANTED) else None
            states = wait_until(firing, timeout=90, interval=0.5, dispatcher=dispatcher,
                                what=f"{sorted(WANTED)} to fire\n{prom.log()}")
            assert states.get("OutboxDispatcherDown") is None
            assert states.get("OutboxNoDispatcher") is None
            seen: set[str] = set()
            for alert in prom.api("alerts")["alerts"]:
                name, labels = alert["labels"]["alertname"], alert["labels"]
                customer = labels.get("endpoint") in CUSTOMERS
                assert labels.get("endpoint") != "acme-paused", alert
                assert customer == (labels.get("audience") == "customer"), alert
                assert labels.get("tenant") == ("acme" if customer else None), alert
                if name in WANTED and labels["endpoint"] == WANTED[name]:
                    seen.add(name)
                    assert alert["annotations"]["runbook_url"] == (
                        "deploy/README.md#" + alert["labels"]["alertname"].lower())
            assert seen == set(WANTED)
            # The dashboard's queries run here too, and those of this failure show it.
            shown = {}
            for title, expr in dashboard_queries():
                result = prom.api("query", query=expr)["result"]
                shown[title] = shown.get(title, False) or bool(result)
            for title in ("Failed attempts per second", "Share of attempts failing",
                          "Pending deliveries", "Oldest pending delivery", "Circuit",
                          "Dispatchers up", "Versions running", "Attempt duration"):
                assert shown[title], f"panel {title!r} shows nothing"
