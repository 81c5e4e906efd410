"""A customer adds a webhook endpoint from the application's own settings page (Django).

    POST /settings/webhooks   url=https://hooks.customer.example/in [events=order.*]
    -> 201 {"endpoint": "customer-acme", "secret": "whsec_..."}

The endpoint belongs to the customer's tenant, the one the application
publishes the customer's events with (``outbox.publish(..., tenant=slug)``),
so it receives that customer's events and nobody else's. It is added in the
same transaction as the application's own audit row: both commit, or
neither does. The secret is shown to the customer once, in the answer; it is
never logged. A bad URL or pattern is a 400, an endpoint the customer
already has a 409, and nothing is written.

The application's tables (here ``webhook_audit``) are its own; the role it
connects as must be allowed to write ``outbox.endpoints``.
"""

from __future__ import annotations

from typing import Any

from django.db import connections, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.http import require_POST

from outbox import endpoints

DB = "default"
"""The Django database alias that holds the outbox schema."""


def customer_of(request: HttpRequest) -> str:
    """The signed-in customer's tenant. Here a header stands in for the session."""
    return request.headers.get("X-Customer", "")


@require_POST
def add_webhook(request: HttpRequest) -> JsonResponse:
    tenant = customer_of(request)
    name = f"customer-{tenant}"
    events = request.POST.getlist("events") or ["*"]
    try:
        with transaction.atomic(using=DB):
            connection = connections[DB]
            connection.ensure_connection()
            # Django's psycopg 3 connection, inside the atomic block's transaction.
            pg: Any = connection.connection
            secret = endpoints.add(pg, name, url=request.POST.get("url", ""), events=events,
                                   tenant=tenant, max_attempts=12)
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO webhook_audit (tenant, action, detail) "
                               "VALUES (%s, 'endpoint added', %s)", [tenant, name])
    except endpoints.EndpointExists:
        return JsonResponse({"error": "you already have a webhook endpoint"}, status=409)
    except endpoints.InvalidEndpoint as exc:  # the message names the option, never a secret
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"endpoint": name, "secret": secret}, status=201)


urlpatterns = [path("settings/webhooks", add_webhook)]
