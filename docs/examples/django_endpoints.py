"""A customer's webhook settings in a Django application: every ``outbox.endpoints`` function.

    POST /settings/webhooks                     url=... [events=order.*] [description=...]
         -> 201 {"endpoint": "customer-acme", "secret": "whsec_..."}    (shown once)
    GET  /settings/webhooks                     -> the customer's endpoints
    GET  /settings/webhooks/NAME                -> one of them (no secret, no header value)
    POST /settings/webhooks/NAME                url=... events=... description=...
    POST /settings/webhooks/NAME/ACTION         disable, enable, rotate, retry, test,
                                                replay (hours=N or event=ID), remove
    GET  /settings/webhooks/NAME/deliveries     [?state=dead&before=CURSOR] -> a page of the log
    GET  /settings/events/EVENT_ID              -> that event's attempts at the customer's endpoints
    GET  /settings/orders/webhooks              -> the customer's orders beside their deliveries

Every call runs in the request's transaction (``transaction.atomic``), on
Django's own psycopg 3 connection, with the signed-in customer as the tenant
guard (``as_tenant``): a name of another customer's endpoint (or of the
operator's) is a 404, exactly as a name nobody has. The endpoint belongs to the
customer's tenant, the one the application publishes the customer's events
with (``outbox.publish(..., tenant=slug)``), so it receives their events and
nobody else's. A URL is checked before it is saved (``check_url=True``: no
internal address, and the dispatcher keeps guarding it), the customer's
endpoint gets no trace context of ours, a bounded backlog whose oldest
deliveries make room, and dead letters kept a week. The error messages name the
function's arguments, never a secret or a command-line flag: they go back to
the customer as they are.

``ROLE``: when set, each transaction switches to that role first (``SET LOCAL
ROLE``), one that ``outbox grants --endpoint-manager ROLE --apply`` made and
the application's own role is a member of; the application's role then needs
no right on the outbox's endpoints itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.db import connections, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from outbox import endpoints
from outbox.errors import EventsNotFound

DB = "default"
"""The Django database alias that holds the outbox schema."""
ROLE: str | None = None
"""The endpoint manager's role (``outbox grants --endpoint-manager``), or None."""
CUSTOMER_ENDPOINT = {"trace_context": False, "max_pending": 10_000,
                     "when_full": "drop-oldest", "keep_dead": "7d", "max_attempts": 12}
"""What every customer's endpoint gets besides what the customer chooses."""


def customer_of(request: HttpRequest) -> str:
    """The signed-in customer's tenant. Here a header stands in for the session."""
    return request.headers.get("X-Customer", "")


@contextmanager
def outbox_transaction() -> Iterator[Any]:
    """The request's transaction and Django's psycopg connection, in the manager's role."""
    with transaction.atomic(using=DB):
        connection = connections[DB]
        connection.ensure_connection()
        if ROLE is not None:  # SET LOCAL ROLE, as a call that takes a parameter
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('role', %s, true)", [ROLE])
        yield connection.connection


def answers(view: Callable[..., Any]) -> Callable[..., JsonResponse]:
    """The view's answer as JSON, and outbox's refusals as the statuses a customer reads."""
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        try:
            status, body = view(request, customer_of(request), *args, **kwargs)
        except (endpoints.EndpointNotFound, EventsNotFound):
            return JsonResponse({"error": "no such webhook endpoint or event"}, status=404)
        except (endpoints.EndpointExists, endpoints.EndpointBusy) as exc:
            return JsonResponse({"error": str(exc)}, status=409)
        except endpoints.InvalidEndpoint as exc:  # names the argument, never a secret
            return JsonResponse({"error": str(exc)}, status=400)
        return JsonResponse(body, status=status, safe=False)  # datetimes, UUIDs as text
    return wrapped


@require_POST
@answers
def add_webhook(request: HttpRequest, tenant: str) -> tuple[int, Any]:
    name = f"customer-{tenant}"
    with outbox_transaction() as pg:
        secret = endpoints.add(pg, name, url=request.POST.get("url", ""), as_tenant=tenant,
                               events=request.POST.getlist("events") or ["*"],
                               description=request.POST.get("description") or None,
                               check_url=True, **CUSTOMER_ENDPOINT)
        with connections[DB].cursor() as cursor:
            cursor.execute("INSERT INTO webhook_audit (tenant, action, detail) "
                           "VALUES (%s, 'endpoint added', %s)", [tenant, name])
    return 201, {"endpoint": name, "secret": secret}


@require_GET
@answers
def webhooks(request: HttpRequest, tenant: str) -> tuple[int, Any]:
    with outbox_transaction() as pg:
        return 200, endpoints.list(pg, as_tenant=tenant)


@answers
def webhook(request: HttpRequest, tenant: str, name: str) -> tuple[int, Any]:
    with outbox_transaction() as pg:
        if request.method == "POST":
            changes = {key: request.POST.getlist(key) if key == "events" else request.POST[key]
                       for key in ("url", "events", "description") if key in request.POST}
            endpoints.update(pg, name, as_tenant=tenant, check_url=True, **changes)
        return 200, endpoints.get(pg, name, as_tenant=tenant)


ACTIONS: dict[str, Callable[[Any, str, str, HttpRequest], Any]] = {
    "disable": lambda pg, name, tenant, rq: endpoints.disable(pg, name, as_tenant=tenant),
    "enable": lambda pg, name, tenant, rq: endpoints.enable(pg, name, as_tenant=tenant),
    "rotate": lambda pg, name, tenant, rq: {
        "secret": endpoints.rotate_secret(pg, name, as_tenant=tenant, overlap="24h")},
    "retry": lambda pg, name, tenant, rq: {
        "due": endpoints.retry_now(pg, name, as_tenant=tenant),
        "retried": endpoints.retry_dead(pg, name, as_tenant=tenant)},
    "test": lambda pg, name, tenant, rq: {
        "event_id": endpoints.send_test(pg, name, as_tenant=tenant, data={"hello": tenant})},
    "replay": lambda pg, name, tenant, rq: {"replayed": endpoints.replay(
        pg, name, as_tenant=tenant,
        since=timedelta(hours=int(rq.POST["hours"])) if "hours" in rq.POST else None,
        event_ids=rq.POST.getlist("event") or None)},
    "remove": lambda pg, name, tenant, rq: {
        "dead_letters": endpoints.remove(pg, name, as_tenant=tenant, force=True)},
}


@require_POST
@answers
def act(request: HttpRequest, tenant: str, name: str, action: str) -> tuple[int, Any]:
    if action not in ACTIONS:
        return 404, {"error": f"no action {action}"}
    with outbox_transaction() as pg:
        return 200, ACTIONS[action](pg, name, tenant, request)


@require_GET
@answers
def deliveries(request: HttpRequest, tenant: str, name: str) -> tuple[int, Any]:
    with outbox_transaction() as pg:
        rows = endpoints.deliveries(pg, name, as_tenant=tenant, limit=20,
                                    state=request.GET.get("state"),
                                    before=request.GET.get("before"))
    return 200, {"deliveries": rows, "next": rows[-1]["cursor"] if len(rows) == 20 else None}


@require_GET
@answers
def event_attempts(request: HttpRequest, tenant: str, event_id: str) -> tuple[int, Any]:
    with outbox_transaction() as pg:
        return 200, endpoints.attempts(pg, event_id, as_tenant=tenant)


@require_GET
@answers
def order_webhooks(request: HttpRequest, tenant: str) -> tuple[int, Any]:
    """The application's own orders beside what became of their events at the customer's
    endpoint: the view outbox.delivery_log joined with its table (``shop_order.event_id``
    is what ``outbox.publish`` returned for the order)."""
    with outbox_transaction(), connections[DB].cursor() as cursor:
        cursor.execute(
            "SELECT o.number, l.state, l.attempts, l.delivered_at, l.last_error "
            "FROM shop_order o JOIN outbox.delivery_log l ON l.event_id = o.event_id "
            "WHERE o.tenant = %s AND l.endpoint = %s ORDER BY o.number DESC LIMIT 50",
            [tenant, f"customer-{tenant}"])
        keys = [column.name for column in cursor.description]
        return 200, [dict(zip(keys, row, strict=True)) for row in cursor.fetchall()]


urlpatterns = [
    path("settings/webhooks", lambda r: (add_webhook if r.method == "POST" else webhooks)(r)),
    path("settings/webhooks/<str:name>", webhook),
    path("settings/webhooks/<str:name>/deliveries", deliveries),
    path("settings/webhooks/<str:name>/<str:action>", act),
    path("settings/events/<str:event_id>", event_attempts),
    path("settings/orders/webhooks", order_webhooks),
]
