"""A Starlette receiver: verify the delivery, then do its work once, in one transaction."""

import os

import psycopg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outbox import receive

FORMAT = os.environ.get("WEBHOOK_FORMAT", "standard-webhooks")  # the endpoint's --format
MAX_BODY = 5 * 1024 * 1024  # bytes; a batch holds at most 4 MiB of payloads
verifier = receive.Verifier(os.environ["WEBHOOK_SECRETS"].split(),  # new and old, when rotating
                            format=FORMAT, max_body=MAX_BODY)
DSN = os.environ["DATABASE_URL"]


async def capped_body(request: Request) -> bytes | None:
    """The body, or None as soon as it passes MAX_BODY: no more than that is held."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None
    return bytes(body)


async def ship(conn: psycopg.AsyncConnection, event: receive.Received) -> None:
    """The receiver's own work, in the same transaction as its inbox record."""
    await conn.execute("INSERT INTO shipments (order_id, event_id) VALUES (%s, %s)",
                       (event.data["order_id"], event.id))


async def hooks(request: Request) -> Response:
    body = await capped_body(request)
    if body is None:
        return Response(status_code=413)
    try:
        events = verifier.verify(request.headers, body)
    except receive.InvalidSignature:
        return Response(status_code=401)  # wrong secret: dead-lettered at once
    except receive.InvalidDelivery:
        return Response(status_code=400)
    # An exception below is a 500: nothing was committed, the dispatcher retries.
    async with await psycopg.AsyncConnection.connect(DSN) as conn, conn.transaction():
        for event in events:
            if await receive.afirst_time(conn, event.id, consumer="shipping"):
                await ship(conn, event)
    return Response(status_code=204)  # committed: done, or skipped as a duplicate


app = Starlette(routes=[Route("/hooks", hooks, methods=["POST"])])
